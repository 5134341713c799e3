"""A delete or a forget reaches the feed's consumers: a tombstone at its position.

Before, nothing in the feed said an agent was deleted or crypto-shredded: a projection
that applied its events kept them for ever (``agent_states`` listed a deleted or
forgotten agent in its last state) while a rebuild from 0 left it out, and the
forgotten agent's derived data outlived its key. Now each delete and forget leaves a
:data:`~statekeeper.store.feed_deletes.AGENT_DELETED` event (``FeedEvent.deleted``)
that consumers receive in order and the shipped read models apply."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.feed import ProjectionRunner
from statekeeper.governance.shredding import forget
from statekeeper.store.feed_deletes import AGENT_DELETED

from ..backends._services import REDIS_URL, delete_prefix, fresh_url, namespace, require_redis

ENGINES = ["memory", "sqlite", "postgresql", "redis", "redis-sharded", "governed", "tiered"]
ADMIN = '[principals.ops]\nadmin = ["**"]\n'


@contextlib.asynccontextmanager
async def opened(engine: str, tmp_path: Path) -> AsyncIterator[StateStore]:
    keyring = Keyring({"k1": bytes(range(32))}, data_keys=MemoryKeyVault())
    if engine == "governed":  # its delete commits with its audit entry; the tombstone after
        from statekeeper.governance import Audit, parse_policy

        url = f"sqlite:///{tmp_path / 'g.db'}"
        policy = parse_policy(ADMIN)
        async with StateStore(
            url, keyring=keyring, principal="ops", policy=policy, audit=Audit()
        ) as store:
            yield store
        return
    if engine == "tiered":  # no commit of two streams: the tombstone after the delete
        from statekeeper.backends.memory import MemoryBackend
        from statekeeper.backends.sqlite import SQLiteBackend
        from statekeeper.backends.tiered import TieredBackend

        tiered = TieredBackend(SQLiteBackend(str(tmp_path / "t.db")), hot=MemoryBackend())
        async with StateStore(tiered, keyring=keyring) as store:
            yield store
        return
    if engine != "redis-sharded":
        with fresh_url(engine, tmp_path) as url:
            async with StateStore(url, keyring=keyring) as store:
                yield store
        return
    require_redis()
    from statekeeper.backends.redis import RedisBackend

    prefix = namespace(tmp_path) + ":"
    delete_prefix(prefix)
    try:
        backend = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
        async with StateStore(backend, keyring=keyring) as store:
            yield store
    finally:
        delete_prefix(prefix)


async def _rows(runner: ProjectionRunner) -> tuple[list[tuple[object, ...]], list[object]]:
    states = await runner.query("SELECT agent_id, seq FROM agent_states ORDER BY agent_id")
    activity = await runner.query("SELECT agent_id FROM agent_activity ORDER BY agent_id")
    return [tuple(r) for r in states], list(activity)


@pytest.mark.parametrize("engine", ENGINES)
async def test_deleted_and_forgotten_agents_leave_the_read_models(
    engine: str, tmp_path: Path
) -> None:
    async with opened(engine, tmp_path) as store:
        for n in range(3):
            await store.save("shop/a", {"n": n})
            await store.save("acme/alice", {"secret": f"s{n}"})
            await store.save("keep", {"n": n})
        behind = [c async for c in store.subscribe(stop_at_head=True)]  # a consumer...
        cursor = behind[-1].position if engine != "redis-sharded" else None
        async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
            await runner.catch_up()
            states, _ = await _rows(runner)
            assert [r[0] for r in states] == ["acme/alice", "keep", "shop/a"]
            assert await store.delete("shop/a")
            result = await forget(store, "acme/alice")
            assert result.destroyed and result.head == 3
            await runner.catch_up()
            live = await _rows(runner)
            assert live == ([("keep", 3)], [("keep",)])  # (both listed for ever, before)
            await runner.rebuild("agent_states")
            await runner.rebuild("agent_activity")
            assert await _rows(runner) == live  # a rebuild from 0 gives the live model
        # every consumer sees the tombstones, after the events (a consumer behind)
        every = [c async for c in store.subscribe(stop_at_head=True)]
        tombs = [c for c in every if c.deleted]
        assert [(c.agent_id, c.seq, c.type, c.event.info) for c in tombs] == [
            ("shop/a", 3, AGENT_DELETED, {"forgotten": False}),
            ("acme/alice", 3, AGENT_DELETED, {"forgotten": True}),
        ]
        assert [c.agent_id for c in every if not c.deleted] == ["keep"] * 3
        if cursor is not None:
            rest = [c async for c in store.subscribe(cursor, stop_at_head=True)]
            assert [(c.agent_id, c.deleted) for c in rest] == [
                ("shop/a", True),
                ("acme/alice", True),
            ]
            assert all(c.position > cursor for c in rest)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_purged_agent_written_again_is_listed_again(engine: str, tmp_path: Path) -> None:
    async with opened(engine, tmp_path) as store:
        await store.save("a", {"n": 0})
        await store.save("a", {"n": 1})
        async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
            await runner.catch_up()
            assert await store.delete("a")
            await store.save("a", {"n": 2})  # a new stream with the same id
            await runner.catch_up()
            live = await _rows(runner)
            assert live == ([("a", 1)], [("a",)])
            await runner.rebuild("agent_states")
            await runner.rebuild("agent_activity")
            assert await _rows(runner) == live


async def test_filtered_subscriptions_ask_for_tombstones_by_type(tmp_path: Path) -> None:
    async with opened("sqlite", tmp_path) as store:
        await store.save("shop/a", {"n": 0})
        await store.save("acme/b", {"n": 0})
        await store.delete("shop/a")
        await store.delete("acme/b")
        typed = store.subscribe(event_types={"other"}, stop_at_head=True)
        assert [c async for c in typed] == []
        asked = store.subscribe(event_types={AGENT_DELETED}, stop_at_head=True)
        assert [c.agent_id async for c in asked] == ["shop/a", "acme/b"]
        shop = store.subscribe(namespace="shop", stop_at_head=True)
        assert [(c.agent_id, c.deleted) async for c in shop] == [
            ("shop/a", False),
            ("shop/a", True),
        ][1:]
        assert await store.list_agents() == []  # the tombstone streams stay hidden


def _dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for t in (
                "agent_states",
                "agent_activity",
                "tool_calls",
                "tool_call_latency",
                "transitions",
                "transition_heads",
            )
        }
    finally:
        conn.close()


@pytest.mark.parametrize("engine", ["sqlite", "redis-sharded"])
async def test_every_builtin_read_model_takes_the_agents_share_out(
    engine: str, tmp_path: Path
) -> None:
    """The counts too: ``tool_calls`` counted a deleted agent's calls and
    ``transitions`` its moves for ever (they name no agent); a rebuild did not."""
    async with opened(engine, tmp_path) as store:
        for n, agent in enumerate(("shop/a", "acme/alice", "keep")):
            for r in range(3):
                await store.save(agent, {"r": r}, fsm_state=("idle", "busy")[(n + r) % 2])
                duration = 0.004 * (n + 1) * (r + 1)  # a's and alice's calls the longest
                await store.append(
                    agent, "tool_call", {"tool": f"t{r % 2}", "duration": 10 - duration}
                )
        await store.append("keep", "tool_call", {"tool": "t0", "duration": 0.001, "ok": False})
        async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
            await runner.catch_up()
            assert await store.delete("shop/a")
            await forget(store, "acme/alice")
            await runner.catch_up()
            live = _dump(tmp_path / "rm.db")
            for name in ("agent_states", "agent_activity", "tool_calls", "transitions"):
                await runner.rebuild(name)
            rebuilt = _dump(tmp_path / "rm.db")
    assert [r[0] for r in live["agent_states"]] == ["keep"]
    assert [r[0] for r in live["transition_heads"]] == ["keep"]
    assert {r[0]: r[1] for r in live["tool_calls"]} == {"t0": 3, "t1": 1}  # keep's only
    for table in ("agent_states", "agent_activity", "tool_call_latency", "transitions"):
        assert live[table] == rebuilt[table], table
    for mine, theirs in zip(live["tool_calls"], rebuilt["tool_calls"], strict=True):
        assert mine[:4] == theirs[:4] and mine[5] == theirs[5]
        assert mine[4] == pytest.approx(theirs[4])  # (a sum less the shares taken out)


async def test_a_read_model_seeded_from_states_drops_an_agent_deleted_at_its_seed(
    tmp_path: Path,
) -> None:
    """A read model rebuilt from the agents' states (``from_states``): an agent deleted
    at the seq it was seeded from leaves it, and the id written again afterwards (a new
    stream, seq 1) is listed again. (The runner also never takes a tombstone for an
    event within a seed while seeds are in force, and drops the agent's seed then.)"""
    async with opened("sqlite", tmp_path) as store:
        for n in range(3):
            await store.save("a", {"n": n})
            await store.save("keep", {"n": n})
        async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
            await runner.rebuild("agent_states", from_states=True)
            assert [r[0] for r in (await _rows(runner))[0]] == ["a", "keep"]
            assert await store.delete("a")  # at seq 3, the seq it was seeded from
            await runner.catch_up()
            assert (await _rows(runner))[0] == [("keep", 3)]
            await store.save("a", {"n": 0})  # seq 1 of a new stream (1 <= 3)
            await runner.catch_up()
            assert (await _rows(runner))[0] == [("a", 1), ("keep", 3)]
