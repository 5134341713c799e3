"""A projection rebuilt after retention trimmed the change feed: from the agents'
current states, then the rest of the feed (it could only be refused: "cannot replay
from 0"); a projection that counts events gets a typed error saying what to do."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import (
    FeedPositionCompacted,
    InvalidArgument,
    ProjectionError,
    ProjectionNeedsHistory,
)
from statekeeper.feed import BUILTINS, ProjectionRunner, seeding
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from .test_projections import _dump, _workload

Opener = Callable[..., StateStore]
SEEDED = ("agent_states", "agent_activity")


async def _trimmed(store: StateStore, live: Path) -> None:
    """A workload followed live, retention trimming the feed, more writes after it."""
    await _workload(store, agents=6, rounds=5)
    async with ProjectionRunner(store, live) as runner:
        await runner.catch_up()
        report = await apply_retention(
            store, RetentionPolicy.parse("ops keep_last=2\nresearch keep_last=3")
        )
        assert report.feed_through is not None and report.feed_through.total > 0
        floor, _ = await store.feed_bounds()
        assert floor > 0
        for a in range(3):  # written after the trim: in the feed
            agent = f"{'ops' if a % 2 else 'research'}/agent-{a}"
            await store.save(agent, {"after": a}, fsm_state="busy")
        await store.save("new/agent", {"n": 1}, fsm_state="idle")
        await runner.catch_up()


async def test_a_rebuild_after_retention_starts_from_the_states_and_equals_the_live_model(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    live = tmp_path / "live.db"
    await _trimmed(store, live)
    fresh = tmp_path / "fresh.db"
    async with ProjectionRunner(store, fresh) as runner, ProjectionRunner(store, live) as again:
        for name in SEEDED:
            applied = await runner.rebuild(name)
            assert runner.seeded == 7  # every agent, from its current state
            assert _dump(fresh, name) == _dump(live, name), name
            assert applied < (await store.feed_bounds())[1]  # not a replay from 0
            await again.rebuild(name)  # in place, over the live read model
            assert _dump(live, name) == _dump(fresh, name), name
        states = {s.name: s for s in await runner.status()}
        assert all(states[n].state == "live" for n in SEEDED)
        await store.save("new/agent", {"n": 2}, fsm_state="done")  # and it goes on live
        await runner.catch_up(list(SEEDED))
        rows = await runner.query("SELECT state, seq FROM agent_states WHERE agent_id = ?",
                                  ["new/agent"])  # fmt: skip
        assert rows == [("done", 2)]


async def test_a_projection_that_counts_events_is_refused_with_what_to_do(
    open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    live = tmp_path / "live.db"
    await _trimmed(store, live)
    floor, _ = await store.feed_bounds()
    async with ProjectionRunner(store, live) as runner:
        for name in ("tool_calls", "transitions"):
            before = _dump(live, name)
            with pytest.raises(ProjectionNeedsHistory) as info:
                await runner.rebuild(name)
            exc = info.value
            assert isinstance(exc, FeedPositionCompacted)  # what callers caught before
            assert (exc.name, exc.floor) == (name, floor)
            assert "--since-floor" in str(exc) and "backup" in str(exc)
            assert _dump(live, name) == before  # nothing changed
            status = {s.name: s for s in await runner.status()}[name]
            assert status.state == "live"
        # the way out it names: the events still in the feed only
        await runner.rebuild("tool_calls", since_floor=True)
        calls = await runner.query("SELECT sum(calls) FROM tool_calls")
        async with ProjectionRunner(store, tmp_path / "other.db") as other:
            with pytest.raises(InvalidArgument):
                await other.rebuild("tool_calls", from_states=True)
        kept = [c async for c in store.subscribe(floor, event_types={"tool_call"},
                                                 stop_at_head=True)]  # fmt: skip
        assert calls == [(len(kept),)] and 0 < len(kept) < 31


async def test_writes_during_the_seeding_are_applied_exactly_once(
    open_store: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events committed while the states are read, before and after an agent's state
    was read: each is in the read model once (from the state or from the feed)."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    live = tmp_path / "live.db"
    await _trimmed(store, live)
    monkeypatch.setattr(seeding, "PAGE", 2)
    get_many = store.get_many
    pages = 0

    async def writing_meanwhile(agent_ids: Sequence[str]) -> Any:
        nonlocal pages
        pages += 1
        first = agent_ids[0]
        await store.save(first, {"page": pages, "before": True})  # in its state
        states = await get_many(agent_ids)
        await store.save(first, {"page": pages, "after": True})  # past its state
        await store.save(agent_ids[-1], {"page": pages}, fsm_state="done")
        await store.save(f"zz/late-{pages}", {"n": 1})  # after the listing: no seed
        return states

    store.get_many = writing_meanwhile  # type: ignore[method-assign]
    async with ProjectionRunner(store, tmp_path / "fresh.db") as fresh:
        for name in SEEDED:
            await fresh.rebuild(name)
        store.get_many = get_many  # type: ignore[method-assign]
        await fresh.catch_up(list(SEEDED))  # (the writes the other rebuild made)
    async with ProjectionRunner(store, live) as runner:
        await runner.catch_up()
    for name in SEEDED:
        assert _dump(tmp_path / "fresh.db", name) == _dump(live, name), name
    with sqlite3.connect(tmp_path / "fresh.db") as db:
        assert db.execute("SELECT count(*) FROM sk_projection_seeds").fetchone() == (0,)


class Crash(Exception):
    """The rebuild's process dying on its third page of states."""


async def _live_at(runner: ProjectionRunner, name: str, head: int) -> bool:
    """Whether ``runner`` has consumed the feed up to ``head`` with ``name`` and
    finished its rebuild (state ``live``)."""
    states = {s.name: s.state for s in await runner.status()}
    return states[name] == "live" and (await runner.consumed([name])).total >= head


def _crash_on_third_page(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Seed two agents a page and make ``store.get_many`` raise :class:`Crash` on its
    third call; returns the real ``get_many``."""
    monkeypatch.setattr(seeding, "PAGE", 2)
    get_many = store.get_many
    calls = 0

    async def crashing(agent_ids: Sequence[str]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Crash
        return await get_many(agent_ids)

    store.get_many = crashing  # type: ignore[method-assign]
    return get_many


async def test_an_interrupted_seeding_resumes_and_follows_nothing_meanwhile(
    open_store: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    live = tmp_path / "live.db"
    await _trimmed(store, live)
    _crash_on_third_page(store, monkeypatch)
    fresh = tmp_path / "fresh.db"
    async with ProjectionRunner(store, fresh) as runner:
        with pytest.raises(Crash):
            await runner.rebuild("agent_activity")
        assert {s.name: s for s in await runner.status()}["agent_activity"].state == "seeding"
        with pytest.raises(ProjectionError, match="rebuild agent_activity"):
            await runner.catch_up(["agent_activity"])  # half seeded: not followed
        await runner.rebuild("agent_activity")  # resumes after the agents seeded
        assert runner.seeded == 3  # the 7 agents, 4 of them seeded before the crash
    assert _dump(fresh, "agent_activity") == _dump(live, "agent_activity")


def test_the_builtins_say_which_can_start_from_states() -> None:
    assert {n for n, p in BUILTINS.items() if p.seeds()} == set(SEEDED)


def test_seeding_a_projection_made_from_events_is_a_typed_refusal() -> None:
    """``Projection.seed`` is optional: called on a projection that does not implement
    it (one that counts events), it is refused with statekeeper's own error naming the
    projection, never a bare ``NotImplementedError``; ``seeds()`` tells beforehand."""
    from statekeeper.records import Snapshot

    projection = BUILTINS["tool_calls"]()
    assert not projection.seeds() and BUILTINS["agent_states"].seeds()
    db = sqlite3.connect(":memory:")
    projection.setup(db)
    state = Snapshot("a", 1, None, {}, 1, 0.0, 0.0)
    with pytest.raises(ProjectionError, match="'tool_calls' cannot be seeded"):
        projection.seed(db, state)


async def test_a_live_runner_on_an_interrupted_seeding_finishes_it_then_follows(
    open_store: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live ``run`` meeting a seeding that died (no rebuild holds its lock any more:
    feed/rebuild_lock.py) does not wait for someone to run ``rebuild`` by hand: one
    warning names the projection, and the runner finishes the rebuild, then follows."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    live = tmp_path / "live.db"
    await _trimmed(store, live)
    said = asyncio.Event()
    messages: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())
            said.set()

    handler = Said(logging.WARNING)
    logger = logging.getLogger("statekeeper.feed.runner")
    logger.addHandler(handler)
    fresh = tmp_path / "fresh.db"
    try:
        async with ProjectionRunner(store, fresh) as runner:
            get_many = _crash_on_third_page(store, monkeypatch)
            with pytest.raises(Crash):
                await runner.rebuild("agent_activity")
            store.get_many = get_many  # type: ignore[method-assign]
            async with ProjectionRunner(store, fresh) as follower:
                following = asyncio.create_task(follower.run(["agent_activity"]))
                try:
                    await said.wait()
                    assert len(messages) == 1
                    assert "'agent_activity'" in messages[0]
                    assert "interrupted; finishing it" in messages[0]
                    head = (await store.feed_bounds())[1]
                    # the rebuild is finished when it is marked live, a commit after
                    # its last batch (was: waited for the events consumed only, and
                    # cancelled the runner between the two under load: "rebuilding")
                    while not await _live_at(follower, "agent_activity", head):  # noqa: ASYNC110
                        await asyncio.sleep(0.01)
                    assert not following.done()
                finally:
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await following
            assert len(messages) == 1  # said once, not once a poll
    finally:
        logger.removeHandler(handler)
    assert _dump(fresh, "agent_activity") == _dump(live, "agent_activity")
    async with ProjectionRunner(store, fresh) as reader:
        states = {s.name: s.state for s in await reader.status()}
    assert states["agent_activity"] == "live"
