"""The common save in one call (issue 11): ``StateStore.save(agent_id, dict)`` with
every option at its default, on a cached record, takes ``WritePipeline.save_fast``
— what the store's options allow is decided once (``decide_fast``), and decided
again when one of them changes — and stores exactly what the general path stores."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError, StoreClosed
from statekeeper.observability import instrument
from statekeeper.records import AppendResult
from statekeeper.store import flat
from statekeeper.store.flat import FlatSave
from statekeeper.store.writes import WritePipeline

from ..conftest import FakeClock


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name}{labels} not exposed")


class Calls:
    """Counts the calls of ``WritePipeline.write`` (the general path) and of
    ``WritePipeline.save_fast`` / ``append_made`` / the flat save (store/flat.py,
    counted as ``fast`` and as ``flat``) that made the save (did not hand it back);
    made before the store is opened (the flat save is bound then)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.write = 0
        self.fast = 0
        self.made = 0  # (WritePipeline.append_made: a DurableAgent's save)
        self.flat = 0  # (the flat save, store/flat.py; counted in ``fast`` too)
        write, fast = WritePipeline.write, WritePipeline.save_fast
        made = WritePipeline.append_made

        async def counted_write(pipeline: WritePipeline, *args: Any, **kwargs: Any) -> Any:
            self.write += 1
            return await write(pipeline, *args, **kwargs)

        async def counted_fast(pipeline: WritePipeline, *args: Any) -> Any:
            done = await fast(pipeline, *args)
            self.fast += done is not None
            return done

        async def counted_made(pipeline: WritePipeline, *args: Any) -> Any:
            done = await made(pipeline, *args)
            self.made += done is not None
            return done

        bind = flat.bind_flat

        def counted_bind(pipeline: WritePipeline) -> FlatSave | None:
            saver = bind(pipeline)
            if saver is None:
                return None

            def counted(agent_id: str, document: dict[str, Any]) -> Any:
                done = saver(agent_id, document)
                if done is None or isinstance(done, AppendResult):
                    self.flat += done is not None
                    self.fast += done is not None
                    return done

                async def landed() -> AppendResult | None:
                    assert done is not None and not isinstance(done, AppendResult)
                    result = await done
                    self.flat += result is not None
                    self.fast += result is not None
                    return result

                return landed()

            return counted

        monkeypatch.setattr("statekeeper.store.writes.bind_flat", counted_bind)
        monkeypatch.setattr(WritePipeline, "write", counted_write)
        monkeypatch.setattr(WritePipeline, "append_made", counted_made)
        monkeypatch.setattr(WritePipeline, "save_fast", counted_fast)


def states(n: int) -> list[tuple[dict[str, Any], str | None]]:
    """Saves that exercise every kind of change the fast path meets."""
    out: list[tuple[dict[str, Any], str | None]] = []
    msgs: list[Any] = []
    for i in range(n):
        msgs = [*msgs, {"role": "user", "content": f"message {i} " + "x" * (i * 7)}]
        doc: dict[str, Any] = {"messages": msgs, "step": i}
        if i % 3 == 0:
            doc["score"] = i / 3  # a float: serialised through the codec
        if i % 4 == 1:
            doc["messages"] = [{"edited": True}, *msgs[1:]]  # not a grown list
        if i % 5 == 2:
            doc.pop("step")  # a key removed
        out.append((doc, "busy" if i % 2 else None))
        if i % 6 == 5:
            out.append((dict(doc), None))  # nothing changed
    return out


async def stored(path: Path) -> list[tuple[Any, ...]]:
    backend = SQLiteBackend(path)
    try:
        return [
            (e.seq, e.type, e.timestamp, e.payload, e.checksum)
            for e in await backend.read("a", 0, None)
        ] + [await backend.head_tag("a")]
    finally:
        await backend.close()


async def test_the_common_save_of_a_cached_agent_is_made_in_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    async with StateStore(f"sqlite:///{tmp_path}/f.db", clock=FakeClock(step=1.0)) as store:
        await store.save("a", {"messages": []})  # created: the general path
        assert (calls.write, calls.fast) == (1, 0)
        for n in range(1, 11):
            await store.save("a", {"messages": [f"m{i}" for i in range(n)]}, fsm_state="s")
        assert (calls.write, calls.fast) == (1, 10)
        await store.save("a", {"messages": []}, info={"why": "reset"})  # an option: general
        assert (calls.write, calls.fast) == (2, 10)
        assert (await store.load("a")).data == {"messages": []}
        assert (await store.verify()).ok


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_the_fast_and_the_general_path_store_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    saves = states(24)
    for name, fast in (("fast.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}",
            clock=FakeClock(step=1.0),
            snapshot_every=4,
            durability=durability,
        ) as store:
            for doc, fsm in saves:
                store._writes.fast = fast  # (the general path: as a store with options)
                await store.save("a", doc, fsm_state=fsm)
            assert (await store.load("a")).data == saves[-1][0]
            assert (await store.verify()).ok
    assert calls.fast > len(saves) // 2  # (most of them went the fast way)
    assert await stored(tmp_path / "fast.db") == await stored(tmp_path / "general.db")
    async with StateStore(f"sqlite:///{tmp_path}/fast.db") as again:  # a cold load of what it wrote
        loaded = await again.load("a")
        assert (loaded.data, loaded.fsm_state) == (saves[-1][0], "busy")


@pytest.mark.parametrize(
    ("url", "durability"),
    [("sqlite:///{tmp}/p.db", "sync"), ("sqlite:///{tmp}/p.db", "group"), ("memory://", "sync")],
)
async def test_a_cached_save_reaches_the_engine_in_plain_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, durability: str
) -> None:
    """The common save crosses to the engine as one ``append_next`` call, or one
    ``commit_next`` that committed it (no request, event or result object on the way),
    also in ``group`` on an engine that batches appends itself (SQLite); anything else
    is still an ``append`` of a request."""
    engine = type(StateStore(url.format(tmp=tmp_path))._writes.backend)
    counted = {"append": 0, "append_next": 0, "commit_next": 0}
    for name in counted:
        original = getattr(engine, name)

        def counting(*args: Any, _original: Any = original, _name: str = name) -> Any:
            result = _original(*args)
            if _name != "commit_next" or result is True:  # (False: nothing committed)
                counted[_name] += 1
            return result

        monkeypatch.setattr(engine, name, counting)

    def plain() -> int:
        return counted["append_next"] + counted["commit_next"]

    async with StateStore(url.format(tmp=tmp_path), durability=durability) as store:
        await store.save("a", {"messages": []})  # created: the general path
        for n in range(1, 11):
            await store.save("a", {"messages": [f"m{i}" for i in range(n)]})
        assert (counted["append"], plain()) == (1, 10)
        await store.save("a", {"messages": []}, info={"why": "reset"})
        assert (counted["append"], plain()) == (2, 10)
        assert (await store.load("a")).data == {"messages": []}
        assert (await store.verify()).ok


async def test_concurrent_cached_saves_share_commits_and_store_what_the_general_path_does(
    tmp_path: Path,
) -> None:
    """16 agents saving at once (``group``): their plain-argument appends queue in
    the engine as they are and share commits; every record is byte for byte what the
    general path stores."""
    agents = [f"agent-{i}" for i in range(16)]
    commits: dict[str, tuple[int, int]] = {}
    for name, fast in (("fast.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(step=1.0), durability="group"
        ) as store:
            store._writes.fast = fast
            for a in agents:  # one at a time: the same clock readings in both files
                await store.save(a, {"messages": []})
            engine: Any = store._writes.backend
            before = engine.append_commits

            async def run(a: str) -> None:
                for n in range(1, 9):
                    await store.save(a, {"messages": [f"{a} m{i}" for i in range(n)]})

            await asyncio.gather(*(run(a) for a in agents))
            commits[name] = (engine.append_commits - before, 16 * 8)
            assert (await store.verify()).ok
    made, saves = commits["fast.db"]
    assert made <= saves // 4  # (shared: 16 saves ready at once go in one commit)

    async def streams(path: Path) -> list[Any]:
        backend = SQLiteBackend(path)
        try:
            return [
                [(e.seq, e.type, e.payload, e.checksum) for e in await backend.read(a, 0, None)]
                + [await backend.head_tag(a)]
                for a in agents
            ]
        finally:
            await backend.close()

    assert await streams(tmp_path / "fast.db") == await streams(tmp_path / "general.db")


async def test_an_observer_attached_after_open_still_observes_every_save(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(monkeypatch)
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        await store.save("a", {"n": 0})
        await store.save("a", {"n": 1})
        assert store._writes.fast and calls.fast == 1
        instrumentation = instrument(store, registry=registry, tracing=False)
        assert not store._writes.fast  # decided again when the observer was set
        for n in range(2, 6):
            await store.save("a", {"n": n})
        assert (
            sample(registry, "statekeeper_operation_duration_seconds_count", operation="save") == 4
        )
        assert (
            sample(registry, "statekeeper_backend_call_duration_seconds_count", call="append") == 4
        )
        assert calls.fast == 1
        instrumentation.uninstall()
        assert store._writes.fast
        await store.save("a", {"n": 6})
        assert calls.fast == 2
        assert (await store.load("a")).data == {"n": 6}


async def test_a_store_whose_options_rule_it_out_never_takes_it(tmp_path: Path) -> None:
    for options in (
        {"durability": "async"},
        {"max_event_bytes": 10_000},
        {"max_state_bytes": 10_000},
        {"validate_cache": False},
    ):
        async with StateStore(f"sqlite:///{tmp_path}/o.db", **options) as store:  # type: ignore[arg-type]
            assert not store._writes.fast, options
    async with StateStore(f"sqlite:///{tmp_path}/o.db") as store:
        assert store._writes.fast
        store._writes.submitter = store._writes.backend.append  # as a governed store does
        assert not store._writes.fast


async def test_a_write_by_another_store_sends_the_save_the_general_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    async with (
        StateStore(f"sqlite:///{tmp_path}/c.db") as mine,
        StateStore(f"sqlite:///{tmp_path}/c.db") as theirs,
    ):
        await mine.save("a", {"messages": ["m0"]})
        await mine.save("a", {"messages": ["m0", "m1"]})
        await theirs.save("a", {"messages": ["m0", "m1", "theirs"], "by": "them"})
        retries = mine._writes.retries
        # the cached head is stale: the compare-and-set refuses it, nothing is written,
        # and the save is made again on the stored state (last writer wins)
        await mine.save("a", {"messages": ["m0", "m1", "mine"]})
        assert mine._writes.retries == retries + 1
        assert (await theirs.load("a")).data == {"messages": ["m0", "m1", "mine"]}
        assert (await mine.verify()).ok
        assert calls.fast == 1


async def test_saves_of_one_agent_at_once_wait_for_each_other(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path}/l.db", clock=FakeClock(step=1.0)) as store:
        await store.save("a", {"n": -1})
        await store.save("a", {"n": 0})
        results = await asyncio.gather(*(store.save("a", {"n": n}) for n in range(1, 9)))
        assert sorted(r.last_seq for r in results) == list(range(3, 11))
        events = [e async for e in store.history("a")]
        assert [e.seq for e in events] == list(range(1, 11))
        assert (await store.load("a")).data == {
            "n": max(results, key=lambda r: r.last_seq).last_seq - 2
        }
        assert (await store.verify()).ok


async def test_typed_values_go_the_general_way_and_are_stored(
    open_store: Callable[..., StateStore],
) -> None:
    store = open_store("memory://")
    when = datetime.datetime(2026, 12, 2, 15, 0, tzinfo=datetime.UTC)
    await store.save("a", {"messages": ["m0"]})
    await store.save("a", {"messages": ["m0", "m1"]})
    await store.save("a", {"messages": ["m0", "m1"], "at": when})
    await store.save("a", {"messages": ["m0", "m1", "m2"], "at": when})
    assert (await store.load("a")).data == {"messages": ["m0", "m1", "m2"], "at": when}
    assert (await store.verify()).ok


async def test_a_closed_store_refuses_the_save_of_a_cached_agent(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/closed.db")
    await store.save("a", {"n": 0})
    await store.save("a", {"n": 1})  # cached, trusted: the fast path's case
    await store.close()
    with pytest.raises(StoreClosed):
        await store.save("a", {"n": 2})
    async with StateStore(f"sqlite:///{tmp_path}/closed.db") as again:
        assert (await again.load("a")).data == {"n": 1}


async def test_a_cached_durable_agent_save_is_made_in_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    async with StateStore(f"sqlite:///{tmp_path}/f.db", clock=FakeClock(step=1.0)) as store:
        agent = await store.agent("a", initial_data={"messages": []})
        before = calls.write
        for n in range(1, 11):
            agent.data["messages"].append(f"m{n}")
            await agent.save()
        assert (calls.write - before, calls.made) == (0, 10)
        await agent.save({"why": "reset"})  # info: the general path
        assert calls.write - before == 1
        assert (await store.load("a")).data == {"messages": [f"m{n}" for n in range(1, 11)]}
        assert (await store.verify()).ok


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_durable_agent_saves_store_the_same_records_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    saves = states(24)
    for name, fast in (("fast.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}",
            clock=FakeClock(step=1.0),
            snapshot_every=4,
            durability=durability,
        ) as store:
            agent = await store.agent("a")
            for i, (doc, _) in enumerate(saves):
                store._writes.fast = fast  # (the general path: as a store with options)
                agent.data = dict(doc) if i % 2 else doc
                if i % 7 == 6:
                    await agent.save({"note": i})  # info: the general path on both
                else:
                    await agent.save()
            assert (await store.load("a")).data == saves[-1][0]
            assert (await store.verify()).ok
    assert calls.made > len(saves) // 2  # (most of them went the fast way)
    assert await stored(tmp_path / "fast.db") == await stored(tmp_path / "general.db")
    async with StateStore(f"sqlite:///{tmp_path}/fast.db") as again:
        assert (await again.load("a")).data == saves[-1][0]


async def test_a_durable_agent_behind_another_writer_saves_the_general_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    async with StateStore(f"sqlite:///{tmp_path}/f.db") as store:
        agent = await store.agent("a", initial_data={"n": 0})
        await store.save("a", {"n": 5})  # the store's head moves past the agent's seq
        agent.data["n"] = 1
        fast = calls.made
        with pytest.raises(ConflictError):
            await agent.save()
        assert calls.made == fast  # handed back: the conflict came from write()
        await agent.refresh()
        assert agent.data == {"n": 5}
