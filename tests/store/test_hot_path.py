"""The hot path (issue 11): a save is one append, with no read before it, and the
append's compare-and-set (head seq and head tag) is the check that the cache is
current — including against a stream deleted and re-created to the same seq."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper import patch as patch_module
from statekeeper.backends import MemoryBackend
from statekeeper.backends.base import Backend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import AgentNotFound, ConfigurationError, ConflictError, InvalidArgument
from statekeeper.records import RawEvent, RawSnapshot

from ..conftest import FakeClock
from .conftest import CountingBackend


class TagCounting(CountingBackend):
    """Counts calls of an engine that compares head tags (and says so)."""

    compares_head_tag = True

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        await self._enter("head_tag")
        return await self.inner.head_tag(agent_id)

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        await self._enter("read_latest")
        snapshot, events = await self.inner.read_latest(agent_id)
        self.events_read += len(events)
        return snapshot, events


class StateCounting(TagCounting):
    """... and of one that reads the head, the snapshot and the tail together."""

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        await self._enter("read_state")
        found = await self.inner.read_state(agent_id)
        self.events_read += len(found[3])
        return found


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    """A factory of backend instances that all share the same storage."""
    if request.param == "memory":
        shared = MemoryBackend()
        return lambda: shared
    return lambda: SQLiteBackend(tmp_path / "hot.db")


async def test_a_save_is_one_append_and_nothing_else(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    backend = TagCounting(engine())
    store = open_store(backend, clock=FakeClock(), snapshot_every=1000)
    await store.save("a1", {"messages": []})
    for n in range(20):
        before = dict(backend.calls)
        await store.save("a1", {"messages": [f"m{i}" for i in range(n + 1)]})
        spent = {k: v - before.get(k, 0) for k, v in backend.calls.items()}
        assert {k: v for k, v in spent.items() if v} == {"append": 1}
    assert (await store.load("a1")).data == {"messages": [f"m{i}" for i in range(20)]}
    assert (await store.verify()).ok


async def test_a_stream_recreated_to_the_same_seq_is_not_written_on_a_stale_chain(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    clock = FakeClock()
    mine = open_store(engine(), clock=clock)
    theirs = open_store(engine(), clock=clock)
    await mine.save("a1", {"by": "mine", "n": 1})
    await mine.save("a1", {"by": "mine", "n": 2})  # cached at seq 2
    clock.advance()
    assert await theirs.delete("a1")
    await theirs.save("a1", {"by": "theirs", "n": 1, "x": True})
    await theirs.save("a1", {"by": "theirs", "n": 2, "x": True})  # seq 2 again, new chain
    result = await mine.save("a1", {"by": "mine", "n": 3})
    assert result.last_seq == 3
    loaded = await theirs.load("a1")
    assert loaded.data == {"by": "mine", "n": 3}  # diffed against their state: no "x"
    report = await theirs.verify()
    assert report.ok, report.problems
    events = [e async for e in theirs.history("a1")]
    assert {"op": "remove", "path": "/x"} in events[2].ops


async def test_a_stale_cache_still_honours_expected_seq(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(engine(), clock=FakeClock())
    theirs = open_store(engine(), clock=FakeClock())
    await mine.save("a1", {"n": 1})
    await theirs.save("a1", {"n": 2})  # mine's cache is at seq 1, the head at 2
    assert (await mine.save("a1", {"n": 3}, expected_seq=2)).last_seq == 3
    with pytest.raises(ConflictError):
        await mine.save("a1", {"n": 4}, expected_seq=2)
    await theirs.delete("a1")
    await theirs.save("a1", {"n": 1})
    await theirs.save("a1", {"n": 2})
    await theirs.save("a1", {"n": 3})  # re-created to mine's cached seq
    assert (await mine.save("a1", {"n": 9}, expected_seq=3)).last_seq == 4
    assert (await theirs.verify()).ok


async def test_an_idempotent_retry_on_a_stale_cache_is_recognised(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(engine(), clock=FakeClock())
    theirs = open_store(engine(), clock=FakeClock())
    await mine.save("a1", {"n": 1})
    first = await mine.save("a1", {"n": 2}, idempotency_key="k")
    await theirs.save("a1", {"n": 3})
    again = await mine.save("a1", {"n": 2}, idempotency_key="k")
    assert again.duplicate and (again.first_seq, again.last_seq) == (2, 2)
    assert first.last_seq == 2
    assert (await mine.load("a1")).data == {"n": 3}


@pytest.mark.parametrize("events", [3, 7, 12])
async def test_a_cold_load_is_the_head_and_one_read_of_snapshot_and_tail(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore], events: int
) -> None:
    writer = open_store(engine(), clock=FakeClock(), snapshot_every=5)
    for n in range(events):
        await writer.save("a1", {"n": n, "log": list(range(n))})
    backend = TagCounting(engine())
    reader = open_store(backend)
    assert (await reader.load("a1")).data == {"n": events - 1, "log": list(range(events - 1))}
    assert backend.calls == {"head_tag": 1, "read_latest": 1}
    assert backend.events_read == events % 5  # only the events after the latest snapshot


@pytest.mark.parametrize("events", [1, 5, 7, 12])
async def test_a_cold_load_is_one_read_where_the_engine_answers_it(
    tmp_path: Path, open_store: Callable[..., StateStore], events: int
) -> None:
    """SQLite reads the head, the latest snapshot and the events after it in one
    statement; a cold load makes that one call and nothing else."""
    writer = open_store(SQLiteBackend(tmp_path / "one.db"), clock=FakeClock(), snapshot_every=5)
    for n in range(events):
        await writer.save("a1", {"n": n, "log": list(range(n))})
    backend = StateCounting(SQLiteBackend(tmp_path / "one.db"))
    reader = open_store(backend, cache_size=0)
    for _ in range(2):
        before = dict(backend.calls)
        loaded = await reader.load("a1")
        assert loaded.data == {"n": events - 1, "log": list(range(events - 1))}
        assert loaded.seq == events
        spent = {k: v - before.get(k, 0) for k, v in backend.calls.items()}
        assert {k: v for k, v in spent.items() if v} == {"read_state": 1}
    assert backend.events_read == 2 * (events % 5)  # only the events after the snapshot
    assert await backend.read_state("nobody") == (0, None, None, [])
    with pytest.raises(AgentNotFound):
        await reader.load("nobody")


async def test_snapshots_bound_the_bytes_a_load_replays(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    writer = open_store(engine(), clock=FakeClock(), snapshot_every=1000, snapshot_bytes=4096)
    for n in range(40):
        await writer.save("a1", {"n": n, "blob": f"{n:04d}" * 250})  # ~1 KiB per event
    assert writer.stats().snapshots_written >= 8
    backend = TagCounting(engine())
    reader = open_store(backend)
    assert (await reader.load("a1")).data["n"] == 39
    assert backend.events_read <= 5  # 4 KiB of events at most, plus the one crossing it
    assert (await reader.verify()).ok


@pytest.mark.parametrize(
    ("value", "error"), [(0, ConfigurationError), ("big", InvalidArgument), (1.5, InvalidArgument)]
)
def test_snapshot_bytes_is_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="snapshot_bytes"):
        StateStore("memory://", snapshot_bytes=value)  # type: ignore[arg-type]


async def test_an_edit_in_the_middle_of_a_grown_history_is_saved(
    engine: Callable[[], Backend], open_store: Callable[..., StateStore]
) -> None:
    store = open_store(engine(), clock=FakeClock())
    data: dict[str, object] = {"messages": [{"text": "a"}], "n": 1}
    await store.save("a1", data)
    for text in "bcd":
        data["messages"].append({"text": text})  # type: ignore[attr-defined]
        await store.save("a1", data)
    data["messages"][1]["text"] = "B"  # type: ignore[index]  # in place, same length
    data["messages"].append({"text": "e"})  # type: ignore[attr-defined]
    data["n"] = True  # not the same as 1
    await store.save("a1", data)
    fresh = open_store(engine())
    loaded = await fresh.load("a1")
    assert loaded.data == data and loaded.data["n"] is True
    assert (await store.load("a1")).data == data


async def test_a_save_is_encoded_once_and_nothing_is_decoded_to_apply_it(
    monkeypatch: pytest.MonkeyPatch, open_store: Callable[..., StateStore]
) -> None:
    """The state after a save is held as the bytes its change detection made: the
    event's bytes are not decoded again, nor its ops applied, and the held state
    shares nothing with the caller's objects."""
    import statekeeper.store.write_build as write_build

    store = open_store("memory://", clock=FakeClock(), snapshot_every=1000)
    doc: dict[str, object] = {"messages": [{"role": "user", "content": "hi"}], "step": 0}
    await store.save("a1", doc)
    decoded: list[bytes] = []
    applied: list[object] = []
    real_apply = patch_module.apply

    def counted_apply(*a: Any, **k: Any) -> Any:
        applied.append(a)
        return real_apply(*a, **k)

    monkeypatch.setattr(write_build, "_loads", lambda b: decoded.append(b) or {})  # type: ignore[func-returns-value]
    monkeypatch.setattr(patch_module, "apply", counted_apply)  # the module the write pipeline uses
    for n in range(1, 6):
        doc["messages"].append({"role": "ai", "content": f"reply {n}"})  # type: ignore[attr-defined]
        doc["step"] = n
        await store.save("a1", doc)
    assert decoded == [] and applied == []
    doc["messages"][0]["content"] = "changed by the caller after the save"  # type: ignore[index]
    stored = (await store.load("a1")).data
    assert stored["messages"][0] == {"role": "user", "content": "hi"}
    assert len(stored["messages"]) == 6 and stored["step"] == 5
    # an edit in place of an old message is still found (and stored)
    await store.save("a1", doc)
    assert (await store.load("a1")).data == doc
    assert (await store.verify()).ok


async def test_a_cold_load_parses_the_state_once_and_shares_nothing_with_the_cache(
    monkeypatch: pytest.MonkeyPatch, open_store: Callable[..., StateStore], tmp_path: Path
) -> None:
    """A state folded for a load goes to the caller as it was decoded (no dumps +
    loads copy); the cache keeps its bytes, so what the caller does with it changes
    nothing stored or cached, and a later write still starts from the stored state."""
    import statekeeper.store.copies as public_copies  # where the caller's copy is made

    url = f"sqlite:///{tmp_path / 'cold.db'}"
    writer = open_store(url, clock=FakeClock(), snapshot_every=3)
    for n in range(1, 5):  # a snapshot at seq 3, one event after it
        await writer.save("a1", {"messages": [f"m{i}" for i in range(n)], "n": n})
    await writer.snapshot("a1")  # the head is now a snapshot
    cold = open_store(url, clock=FakeClock())
    copies: list[object] = []
    monkeypatch.setattr(public_copies, "_loads", lambda b: copies.append(b) or {})  # type: ignore[func-returns-value]
    first = (await cold.load("a1")).data
    assert copies == []  # the caller got the decoded objects themselves
    monkeypatch.undo()
    first["messages"].append("caller's own")
    first["n"] = -1
    again = (await cold.load("a1")).data  # from the cache
    assert again == {"messages": ["m0", "m1", "m2", "m3"], "n": 4}
    await cold.save("a1", {**again, "n": 5})
    assert (await cold.load("a1")).data == {"messages": ["m0", "m1", "m2", "m3"], "n": 5}
    assert (await open_store(url).load("a1")).data == {
        "messages": ["m0", "m1", "m2", "m3"],
        "n": 5,
    }
    assert (await cold.verify()).ok


@pytest.mark.parametrize("past_snapshot", [0, 3])
async def test_a_state_kept_by_nobody_is_handed_over_without_a_copy(
    tmp_path: Path,
    open_store: Callable[..., StateStore],
    monkeypatch: pytest.MonkeyPatch,
    past_snapshot: int,
) -> None:
    """With the cache off (and for a state in the past) the folded objects are the
    caller's copy: nothing is serialised to keep one, and the caller's changes reach no
    later load."""
    from statekeeper.store import copies  # where the caller's copy is made

    writer = open_store(SQLiteBackend(tmp_path / "c.db"), clock=FakeClock(), snapshot_every=4)
    for n in range(4 + past_snapshot):
        await writer.save("a1", {"n": n, "log": [{"i": i} for i in range(n)]})
    reader = open_store(SQLiteBackend(tmp_path / "c.db"), cache_size=0)

    def no_copy(value: object) -> bytes:
        raise AssertionError("the state was serialised to keep a copy nobody keeps")

    monkeypatch.setattr(copies, "_dumps", no_copy)
    monkeypatch.setattr(copies, "_loads", no_copy)
    n = 3 + past_snapshot
    first = await reader.load("a1")
    assert first.data == {"n": n, "log": [{"i": i} for i in range(n)]}
    first.data["log"].append("mine")
    first.data["n"] = -1
    assert (await reader.load("a1")).data == {"n": n, "log": [{"i": i} for i in range(n)]}
    past = await reader.load("a1", at_seq=2)
    assert past.data == {"n": 1, "log": [{"i": 0}]}
    past.data["log"].clear()
    assert (await reader.load("a1", at_seq=2)).data == {"n": 1, "log": [{"i": 0}]}
