"""Projections: read models from the feed, each event applied exactly once."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.errors import FeedPositionCompacted, ProjectionFailed, UnknownProjection
from statekeeper.feed import BUILTINS, Projection, ProjectionRunner
from statekeeper.observability.analysis.history import moves
from statekeeper.records import FeedEvent

Opener = Callable[..., StateStore]

STATES = ("idle", "busy", "done")


async def _workload(store: StateStore, agents: int = 6, rounds: int = 5) -> None:
    for r in range(rounds):
        for a in range(agents):
            agent = f"{'ops' if a % 2 else 'research'}/agent-{a}"
            await store.save(agent, {"round": r}, fsm_state=STATES[(a + r) % 3])
            await store.append(
                agent, "tool_call", {"tool": f"tool-{a % 3}", "duration": 0.01 * (a + r)}
            )
    await store.append("ops/agent-1", "tool_call", {"tool": "tool-1", "ok": False})


def _dump(path: Path, projection: str) -> dict[str, list[tuple[Any, ...]]]:
    tables = BUILTINS[projection].tables
    with sqlite3.connect(path) as db:
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


async def test_builtins_agree_with_the_store(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    await _workload(store)
    async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
        applied = await runner.catch_up()
        assert applied["agent_activity"] == 61 and applied["tool_calls"] == 31
        states = dict(await runner.query("SELECT agent_id, state FROM agent_states"))
        async for info in store.iter_agents():
            assert states[info.agent_id] == (await store.load(info.agent_id)).fsm_state
        activity = await runner.query(
            "SELECT agent_id, events, last_seq FROM agent_activity WHERE namespace = 'ops'"
            " ORDER BY last_activity DESC"
        )
        assert {r[0] for r in activity} == {"ops/agent-1", "ops/agent-3", "ops/agent-5"}
        for agent_id, events, last_seq in activity:
            assert events == last_seq == await store.head(agent_id)
        tools = {r[0]: r[1:] for r in await runner.query("SELECT * FROM tool_calls")}
        assert tools["tool-1"][:3] == (11, 1, 10)  # calls, failures, timed
        histogram = await runner.query(
            "SELECT sum(count) FROM tool_call_latency WHERE tool = 'tool-1'"
        )
        assert histogram == [(10,)]
        # the transition counts are exactly the moves the observability analysis counts
        expected = Counter([(m.source, m.target) async for m in moves(store)])
        counted = {(s, t): n for s, t, n in await runner.query("SELECT * FROM transitions")}
        assert counted == dict(expected)


class _Boom(Projection):
    name = "boom"
    tables: ClassVar[tuple[str, ...]] = ("boom",)
    fail_on: ClassVar[str | None] = "poison"

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS boom (agent_id TEXT, seq INT)")

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        db.execute("INSERT INTO boom VALUES (?, ?)", (change.agent_id, change.seq))
        if change.event.info.get("kind") == self.fail_on:
            raise ValueError("cannot handle this event")


async def test_a_raising_handler_stops_only_its_projection(
    open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.save("a", {"n": 1})
    await store.append("a", "note", {"kind": "poison"})
    await store.save("a", {"n": 2})
    boom = _Boom()
    async with ProjectionRunner(
        store, tmp_path / "rm.db", [boom, BUILTINS["agent_activity"]()]
    ) as runner:
        failures = await asyncio.wait_for(runner.run(["boom"]), 60)
        assert [f.position for f in failures] == [(await runner.status())[1].error_position]
        status = {s.name: s for s in await runner.status()}
        assert status["boom"].state == "failed" and status["boom"].position == 0
        assert "ValueError: cannot handle this event" in (status["boom"].error or "")
        assert await runner.query("SELECT * FROM boom") == []  # the batch rolled back
        # the store and the other projections carry on
        await store.save("b", {"n": 1})
        assert (await runner.catch_up(["agent_activity"]))["agent_activity"] == 4
        with pytest.raises(ProjectionFailed) as info:
            await runner.catch_up(["boom"])  # still failing: still at its position
        assert (info.value.agent_id, info.value.seq) == ("a", 2)
        # fixed handler: resumes at the failed event, each event once
        boom.fail_on = "nothing"  # type: ignore[misc]
        assert (await runner.catch_up(["boom"]))["boom"] == 4
        assert await runner.query("SELECT agent_id, seq FROM boom ORDER BY rowid") == [
            ("a", 1),
            ("a", 2),
            ("a", 3),
            ("b", 1),
        ]
        status = {s.name: s for s in await runner.status()}
        assert status["boom"].state == "live" and status["boom"].error is None


async def test_rebuild_is_resumable_and_equals_the_live_model(
    open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await _workload(store, agents=4, rounds=10)
    rm = tmp_path / "rm.db"
    async with ProjectionRunner(store, rm, batch_size=8) as runner:
        await runner.catch_up()
        live = _dump(rm, "transitions")

        class Interrupted(Exception):
            pass

        def stop_half_way(position: int, target: int) -> None:
            if position > target // 2:
                raise Interrupted

        with pytest.raises(Interrupted):
            await runner.rebuild("transitions", progress=stop_half_way)
        status = {s.name: s for s in await runner.status()}["transitions"]
        assert status.state == "rebuilding" and 0 < status.position < status.head
        done_before = status.applied
        rest = await runner.rebuild("transitions")  # resumes, does not start over
        assert done_before + rest == 81
        assert _dump(rm, "transitions") == live
        assert {s.name: s for s in await runner.status()}["transitions"].state == "live"


async def test_rebuild_of_a_trimmed_feed_says_so(open_store: Opener, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.save("a", {"n": 1})
    await store.save("a", {"n": 2})
    await store.trim_feed(1)
    async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
        with pytest.raises(FeedPositionCompacted):  # counts events: refused
            await runner.rebuild("transitions")
        await runner.rebuild("agent_states")  # from the agents' states
        assert runner.seeded == 1
        with pytest.raises(UnknownProjection) as info:
            await runner.rebuild("nope")
        assert "agent_states" in str(info.value)


async def test_two_runners_on_one_read_model_apply_each_event_once(
    open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await _workload(store, agents=3, rounds=8)
    rm = tmp_path / "rm.db"
    async with (
        ProjectionRunner(store, rm, batch_size=5) as one,
        ProjectionRunner(store, rm, batch_size=3) as two,
    ):
        await asyncio.gather(one.catch_up(["agent_activity"]), two.catch_up(["agent_activity"]))
        rows = await one.query("SELECT sum(events) FROM agent_activity")
    assert rows == [((await store.feed_bounds())[1],)] == [(49,)]


_op = st.one_of(
    st.tuples(st.just("save"), st.integers(0, 3), st.sampled_from(STATES)),
    st.tuples(st.just("tool"), st.integers(0, 3), st.floats(0, 20, allow_nan=False)),
    st.tuples(st.just("catch_up"), st.just(0), st.just(0)),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(_op, max_size=40), batch=st.integers(1, 9))
def test_rebuild_from_zero_equals_the_live_read_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, Any]], batch: int
) -> None:
    async def scenario() -> None:
        base = tmp_path_factory.mktemp("prop")
        async with StateStore("memory://") as store:
            live_db, fresh_db = base / "live.db", base / "fresh.db"
            async with ProjectionRunner(store, live_db, batch_size=batch) as live:
                for kind, agent, value in ops:
                    if kind == "save":
                        await store.save(f"ns{agent % 2}/a{agent}", {"v": value}, fsm_state=value)
                    elif kind == "tool":
                        await store.save(f"ns{agent % 2}/a{agent}", {})
                        await store.append(
                            f"ns{agent % 2}/a{agent}", "tool_call", {"tool": "t", "duration": value}
                        )
                    else:
                        await live.catch_up()  # live, a bit at a time
                await live.catch_up()
                async with ProjectionRunner(store, fresh_db, batch_size=7) as fresh:
                    for name in BUILTINS:
                        await fresh.rebuild(name)
                        await live.rebuild(name)  # a rebuild in place, too
                for name in BUILTINS:
                    assert _dump(live_db, name) == _dump(fresh_db, name)

    asyncio.run(scenario())
