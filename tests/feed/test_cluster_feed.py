"""The change feed on a real local Redis Cluster (3 masters, 3 replicas, started by the
test on free loopback ports): retention per shard (``feed_cursor_bounds``,
``trim_feed(FeedCursor)``) and a subscriber that follows the store while a master is
SIGKILLed under writers — every acknowledged write is delivered exactly once, in
per-agent order.

Slow (a cluster takes seconds to form): run with ``-m "slow or not slow"``.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

from redis.asyncio.cluster import RedisCluster

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import BackendError, ConflictError
from statekeeper.records import FeedEvent
from statekeeper.testing.redis_cluster import LocalRedisCluster

from ..backends._services import namespace
from ._retention import check_sharded_retention

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
        reason="needs redis-server and redis-cli",
    ),
]

DEADLINE = 180.0  # a generous bound for a condition on a loaded machine, never a pause


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas=1) as c:
        yield c


async def test_retention_per_shard_on_a_cluster(cluster: LocalRedisCluster, tmp_path: Path) -> None:
    # wait_timeout: the only bound on a replica's acknowledgement (WAIT returns at
    # once when it comes); the 2 s default is short for a loaded machine
    url = (
        f"{cluster.url}?prefix={namespace(tmp_path)}:"
        "&wait_replicas=1&wait_timeout=60&socket_timeout=90"  # (socket's above WAIT's)
    )
    async with StateStore(url) as store:
        assert isinstance(store.backend, RedisBackend) and store.backend.cluster
        await check_sharded_retention(store, store.backend.feed_shards)


async def test_a_subscriber_sees_every_acknowledged_write_once_across_a_failover(
    cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    url = (
        f"{cluster.url}?prefix={namespace(tmp_path)}:&wait_replicas=1&wait_timeout=1"
        "&retry_timeout=60"
    )
    async with StateStore(url) as store:
        backend = store.backend
        assert isinstance(backend, RedisBackend)
        client = backend._client
        assert isinstance(client, RedisCluster)
        agents = [f"fo/agent-{i}" for i in range(18)]
        for agent in agents:
            await store.save(agent, {"n": 0})

        def port_of(agent: str) -> int:
            node = client.get_node_from_key(backend._agent(agent).hash.decode())
            assert node is not None
            return int(node.port)

        victim = port_of(agents[0])
        replica = cluster.replica_of(victim)
        on_victim = [a for a in agents if port_of(a) == victim]
        acked: dict[str, dict[int, int]] = {a: {1: 0} for a in agents}  # seq -> n
        seen: list[FeedEvent] = []
        stop = asyncio.Event()
        progress = asyncio.Event()
        delivered = asyncio.Event()

        async def writer(agent: str) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                while True:  # the same write again until acknowledged (idempotent)
                    try:
                        done = await store.append(
                            agent, "tick", {"n": n}, idempotency_key=f"{agent}-{n}"
                        )
                        break
                    except (BackendError, ConflictError):
                        continue  # not acknowledged: it may or may not be stored
                acked[agent][done.last_seq] = n
                progress.set()

        sub = store.subscribe(0, batch_size=16)
        watched: list[asyncio.Task[None]] = []

        async def follow() -> None:
            async for change in sub:
                seen.append(change)
                delivered.set()

        async def until(check: object) -> None:
            assert callable(check)
            while not check():
                for task in watched:  # a writer or the follower that failed: its error
                    if task.done() and not task.cancelled() and task.exception():
                        task.result()
                progress.clear()
                delivered.clear()
                waits = [asyncio.create_task(e.wait()) for e in (progress, delivered)]
                await asyncio.wait_for(
                    asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), DEADLINE
                )
                for w in waits:
                    w.cancel()

        def acked_total(which: list[str]) -> int:
            return sum(len(acked[a]) for a in which)

        follower = asyncio.create_task(follow())
        tasks = [asyncio.create_task(writer(a)) for a in agents]
        watched += [follower, *tasks]
        await until(lambda: acked_total(agents) >= 150 and len(seen) >= 50)
        cluster.kill(victim)  # SIGKILL, mid-write, mid-subscription
        await asyncio.to_thread(cluster.wait_promoted, replica)
        # the promoted master has no replica until the old one comes back as its replica:
        # until then its writes (and feed reads) cannot be confirmed
        await asyncio.to_thread(cluster.restart, victim)
        before = acked_total(on_victim)
        await until(lambda: acked_total(on_victim) >= before + 30)
        stop.set()
        await asyncio.gather(*tasks)

        def all_delivered() -> bool:
            got = {(e.agent_id, e.seq) for e in seen}
            return all((a, s) in got for a in agents for s in acked[a])

        await until(all_delivered)
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower
        # whatever is stored past the live cursor (unacknowledged writes that landed)
        seen += [e async for e in store.subscribe(sub.cursor, stop_at_head=True)]

        pairs = [(e.agent_id, e.seq) for e in seen]
        assert len(pairs) == len(set(pairs)), "an event was delivered twice"
        last: dict[str, int] = {}
        for e in seen:  # per-agent order, no gap
            assert e.seq == last.get(e.agent_id, 0) + 1, (e.agent_id, e.seq)
            last[e.agent_id] = e.seq
        by_pair = {(e.agent_id, e.seq): e for e in seen}
        for agent in agents:  # every acknowledged write, with what was written
            for seq, n in acked[agent].items():
                assert by_pair[(agent, seq)].event.info.get("n", 0) == n, (agent, seq)
        assert acked_total(on_victim) > len(on_victim)
