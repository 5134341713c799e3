"""The flat save (store/flat.py, issue 11): ``StateStore.save(agent_id, dict)`` of a
cached agent made in one plain call — each case it makes stores what the general path
stores, each case it hands on is made by ``save_fast`` or the general path, a conflict on
its cached head and an eviction while the engine appends it lose nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend

from ..conftest import FakeClock
from .test_save_fast import Calls, stored


def history(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message {i} " + "x" * (i % 7)} for i in range(n)]


#: (the document, whether the flat save makes it): every case the flat save meets
SAVES: list[tuple[dict[str, Any], bool]] = [
    ({"messages": history(3), "step": 1, "a/b": "x"}, True),  # a list grew (fixarray)
    ({"messages": history(3), "step": 2, "a/b": "x"}, True),  # a scalar replaced
    ({"messages": history(3), "step": 2, "a/b": "y"}, True),  # an escaped key replaced
    ({"messages": history(3), "step": 2, "a/b": "y"}, True),  # nothing changed
    ({"messages": history(5), "step": 3, "a/b": "y"}, True),  # two changes, stored order
    ({"step": 4, "messages": history(6), "a/b": "y"}, False),  # two changes, another order
    ({"messages": history(20), "step": 5, "a/b": "y"}, False),  # (stored in the order above)
    ({"messages": history(21), "step": 5, "a/b": "y"}, True),  # grew, 16-bit array
    ({"messages": history(21), "step": 5, "a/b": "y"}, True),  # nothing changed
    ({"messages": history(15), "step": 5, "a/b": "y"}, False),  # a list shrank
    ({"messages": history(17), "step": 5, "a/b": "y"}, True),  # fixarray -> 16-bit array
    ({"messages": history(22), "step": 5.5, "a/b": "y"}, True),  # a float: the codec's JSON
    ({"messages": history(22), "step": 6, "a/b": {"k": 1}}, False),  # a dict: the general diff
    ({"messages": history(22), "step": 6, "a/b": {"k": 2}}, False),  # a dict changed
    ({"messages": history(21), "step": 6, "a/b": {"k": 2}}, False),  # a list shrank
    ({"messages": [{"edited": 1}, *history(22)[1:]], "step": 6, "a/b": 1}, False),  # edited
    ({"messages": history(22), "step": 6, "a/b": 1, "new": True}, False),  # a key added
    ({"messages": history(23), "step": 7}, False),  # a key removed
    ({"messages": history(24), "step": 7}, True),
    ({"messages": history(26), "step": (1, 2)}, False),  # a tuple: not plain JSON
    ({"messages": history(27), "step": 9}, True),  # (the bytes of the state above made now)
    ({"messages": history(28), "step": 10}, True),
    ({"messages": [*history(28), {"$t": "x"}], "step": 10}, False),  # the codec's tag key
    ({"messages": [*history(28), {"$t": "x"}, "m"], "step": 10}, False),  # (held as typed)
]


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_the_flat_save_stores_what_the_general_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    for name, fast in (("flat.db", True), ("general.db", False)):
        # (a clock that stands still: save_fast reads it before handing a save of
        # values it cannot pack on to the general path, which reads it again)
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}",
            clock=FakeClock(),
            snapshot_every=1000,
            durability=durability,
        ) as store:
            await store.save("a", {"messages": history(2), "step": 0, "a/b": "x"})
            made = []
            for doc, _ in SAVES:
                store._writes.fast = fast  # (False: the general path, as with options)
                before = calls.flat
                await store.save("a", doc)
                made.append(calls.flat > before)
            if fast:
                assert made == [flat for _, flat in SAVES]
            assert (await store.load("a")).data == SAVES[-1][0]
            assert (await store.verify()).ok
    assert await stored(tmp_path / "flat.db") == await stored(tmp_path / "general.db")


async def test_a_due_snapshot_is_written_by_save_fast_and_stored_as_the_general_path_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    for name, fast in (("flat.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(step=1.0), snapshot_every=3
        ) as store:
            for n in range(1, 11):
                store._writes.fast = fast
                await store.save("a", {"messages": history(n)})
            if fast:  # saves 3, 6 and 9 write a snapshot: save_fast's
                assert (calls.flat, calls.fast, store._writes.snapshots_written) == (6, 9, 3)
    assert await stored(tmp_path / "flat.db") == await stored(tmp_path / "general.db")


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_conflict_on_the_flat_save_drops_the_record_and_loses_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    async with (
        StateStore(f"sqlite:///{tmp_path}/c.db", durability=durability) as mine,
        StateStore(f"sqlite:///{tmp_path}/c.db") as theirs,
    ):
        await mine.save("a", {"messages": ["m0"]})
        await mine.save("a", {"messages": ["m0", "m1"]})
        assert calls.flat == 1
        await theirs.save("a", {"messages": ["m0", "m1", "theirs"]})
        retries, writes = mine._writes.retries, calls.write
        # the flat save's compare-and-set is refused on the stale cached head: nothing
        # written, the record dropped, the save made again on the stored state
        await mine.save("a", {"messages": ["m0", "m1", "mine"]})
        assert mine._writes.retries == retries + 1
        assert calls.flat == 1 and calls.write == writes + 1
        seqs = [e.seq async for e in theirs.history("a")]
        assert seqs == [1, 2, 3, 4]  # gap-free, theirs kept
        assert (await theirs.load("a")).data == {"messages": ["m0", "m1", "mine"]}
        assert (await mine.verify()).ok
        # the record read again is trusted: the next save is flat again
        await mine.save("a", {"messages": ["m0", "m1", "mine", "again"]})
        assert calls.flat == 2
        assert (await theirs.load("a")).data == {"messages": ["m0", "m1", "mine", "again"]}


async def test_a_record_evicted_while_the_engine_appends_the_flat_save_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine declines to commit at once (as with another task ready): the flat
    save hands back the append to await, during which the record is evicted; once the
    append lands the record at the new head is cached again, and the next save is
    flat and correct."""
    calls = Calls(monkeypatch)
    declining = {"on": False, "declined": 0, "evicted": 0}
    commit, append = SQLiteBackend.commit_next, SQLiteBackend.append_next

    def commit_next(self: SQLiteBackend, row: Any) -> bool:
        if declining["on"]:
            declining["declined"] += 1
            return False
        return commit(self, row)

    async def append_next(self: SQLiteBackend, *row: Any) -> None:
        if declining["on"]:
            store._writes.reads.cache.discard(row[0])  # evicted meanwhile
            declining["evicted"] += 1
        await append(self, *row)

    monkeypatch.setattr(SQLiteBackend, "commit_next", commit_next)
    monkeypatch.setattr(SQLiteBackend, "append_next", append_next)
    store = StateStore(f"sqlite:///{tmp_path}/e.db")
    async with store:
        await store.save("a", {"messages": ["m0"]})
        await store.save("a", {"messages": ["m0", "m1"]})
        declining["on"] = True
        await store.save("a", {"messages": ["m0", "m1", "m2"]})
        assert (declining["declined"], declining["evicted"], calls.flat) == (1, 1, 2)
        cached = store._writes.reads.cache.peek("a")
        assert cached is not None and cached.seq == 3 and cached.tag_known
        declining["on"] = False
        await store.save("a", {"messages": ["m0", "m1", "m2", "m3"]})
        assert calls.flat == 3
        assert (await store.load("a")).data == {"messages": ["m0", "m1", "m2", "m3"]}
        assert (await store.verify()).ok


async def test_options_that_rule_out_the_flat_save_leave_it_unbound(tmp_path: Path) -> None:
    for kw in (
        {"snapshot_every": "auto"},
        {"compression": "zstd"},
    ):
        async with StateStore(f"sqlite:///{tmp_path}/o{len(kw)}.db", **kw) as store:
            assert store._writes.flat is None, kw
            await store.save("a", {"messages": ["m0"]})
            await store.save("a", {"messages": ["m0", "m1"]})
            assert (await store.load("a")).data == {"messages": ["m0", "m1"]}
    async with StateStore(f"sqlite:///{tmp_path}/plain.db") as store:
        assert store._writes.flat is not None
    async with StateStore(f"sqlite:///{tmp_path}/group.db", durability="group") as store:
        assert store._writes.flat is not None  # (every flat save joins the group's commit)
    # the replay-cost rules (the default "bounded", and "cost") are applied inline
    async with StateStore(f"sqlite:///{tmp_path}/cost.db", snapshot_every="cost") as store:
        assert store._writes.flat is not None


async def _rows(path: Path, agents: list[str]) -> list[tuple[Any, ...]]:
    backend = SQLiteBackend(path)
    try:
        return [
            (a, e.seq, e.type, e.timestamp, e.payload, e.checksum)
            for a in agents
            for e in await backend.read(a, 0, None)
        ] + [await backend.head_tag(a) for a in agents]
    finally:
        await backend.close()


@pytest.mark.parametrize("kept", [4096, 1])
async def test_agents_and_keys_saved_in_turn_store_what_the_general_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    """The flat save keeps each key's patch paths and each agent's link prefix
    (``flat._KEPT`` of each, 1 here: the rest made on every save): several agents
    saved in turn, keys escaped or not, store the general path's rows."""
    from statekeeper.store import flat

    monkeypatch.setattr(flat, "_KEPT", kept, raising=False)
    calls = Calls(monkeypatch)
    agents = ["a", "b", "c/d"]
    for name, fast in (("flat.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(), snapshot_every=1000
        ) as store:
            for a in agents:
                await store.save(a, {"messages": history(2), "x~y": 0, "p/q": "-"})
            made = calls.flat
            for n in range(3, 9):
                store._writes.fast = fast
                for i, a in enumerate(agents):
                    doc: dict[str, Any] = {"messages": history(n + i), "x~y": 0, "p/q": "-"}
                    if n % 3 == i:
                        doc = {"messages": history(n + i - 1), "x~y": n, "p/q": "-"}
                    elif n % 3 == (i + 1) % 3:
                        doc = {"messages": history(n + i - 1), "x~y": 0, "p/q": str(n)}
                    await store.save(a, doc)
            if fast:
                assert calls.flat - made == 18
            assert (await store.verify()).ok
    assert await _rows(tmp_path / "flat.db", agents) == await _rows(tmp_path / "general.db", agents)
