"""Read replicas (``replica_url=``): loads and the feed from a real streaming replica,
writes to the primary, read-your-writes for the writing process.

The tests start their own primary and replica (``initdb``, ``pg_basebackup -R``, their
own ports and data directories in a temp dir; as root they run as the ``postgres``
user) and stop them after; the shared server is never touched. Replication lag is made
deterministic by pausing replay on the replica (``pg_wal_replay_pause()``), never by
waiting for a duration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from urllib.parse import quote

import pytest

pytest.importorskip("psycopg")

import contextlib

import psycopg

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.replica import ReplicaReads
from statekeeper.errors import ConfigurationError, ConflictError
from statekeeper.records import AppendRequest, RawEvent

from ._services import PrivatePostgres, free_port

pytestmark = pytest.mark.slow


class ReplicaPair:
    """A private primary and a streaming replica of it."""

    def __init__(self) -> None:
        self.primary = PrivatePostgres()
        self.primary.start()
        # pg_ctl may be a symlink on the PATH; its siblings are in the real bin dir
        self.bindir = os.path.dirname(os.path.realpath(f"{self.primary.bindir}/pg_ctl"))
        self.port = free_port()
        self.data = os.path.join(self.primary.dir, "replica")
        subprocess.run(
            [
                *self.primary._as,
                f"{self.bindir}/pg_basebackup",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.primary.port),
                "-U",
                "postgres",
                "-D",
                self.data,
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ctl(
            "-o",
            f"-p {self.port} -k {self.primary.dir} -c listen_addresses=127.0.0.1",
            "-l",
            os.path.join(self.primary.dir, "replica.log"),
            "start",
        )

    @property
    def replica_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.primary._as, f"{self.bindir}/pg_ctl", "-D", self.data, "-w", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def on_replica(self, query: str) -> object:
        with psycopg.connect(self.replica_dsn, autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        return row[0] if row else None

    def pause(self) -> None:
        self.on_replica("SELECT pg_wal_replay_pause()")

    def resume(self) -> None:
        self.on_replica("SELECT pg_wal_replay_resume()")

    def caught_up(self) -> None:
        """Wait (a condition, bounded) until the replica has replayed all the primary
        has written."""
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        with psycopg.connect(self.replica_dsn, autocommit=True) as conn:
            for _ in range(3000):
                done = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                if done and done[0]:
                    return
                conn.execute("SELECT pg_sleep(0.01)")
        raise AssertionError(f"the replica did not replay up to {target}")

    def stop_replica(self) -> None:
        self._ctl("-m", "immediate", "stop")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_replica()
        self.primary.close()


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    servers = ReplicaPair()
    try:
        yield servers
    finally:
        servers.close()


def _backend(pair: ReplicaPair) -> PostgresBackend:
    return PostgresBackend(
        pair.primary.dsn,
        schema="agents",
        max_size=2,
        replica_url=pair.replica_dsn,
        retry_timeout=5,
        connect_timeout=2,
    )


def request(agent_id: str, expected_seq: int, body: bytes) -> AppendRequest:
    seq = expected_seq + 1
    return AppendRequest(agent_id, expected_seq, (RawEvent(seq, "patch", 1.0, body, b"ck"),))


def _served(backend: PostgresBackend) -> dict[str, int]:
    assert isinstance(backend._replica, ReplicaReads)
    return dict(backend._replica.served)


async def test_loads_come_from_the_replica_and_the_writer_reads_its_own_writes(
    pair: ReplicaPair,
) -> None:
    writer = _backend(pair)
    reader = _backend(pair)  # another process: it has written nothing
    try:
        await writer.append(request("a", 0, b"one"))
        pair.caught_up()
        assert [e.payload for e in await reader.read("a")] == [b"one"]
        assert _served(reader) == {"replica": 1, "primary": 0}

        # the replica stops replaying: the writer's next write is not on it
        pair.pause()
        await writer.append(request("a", 1, b"two"))
        # the writer still reads its own write (the primary answers)...
        assert [e.payload for e in await writer.read("a")] == [b"one", b"two"]
        assert _served(writer)["primary"] == 1
        head, _, _, events = await writer.read_state("a")
        assert head == 2 and [e.payload for e in events] == [b"one", b"two"]
        # ...while a process that did not write is served by the (lagging) replica
        assert [e.payload for e in await reader.read("a")] == [b"one"]
        assert _served(reader) == {"replica": 2, "primary": 0}

        pair.resume()
        pair.caught_up()
        before = _served(writer)
        assert [e.payload for e in await writer.read("a")] == [b"one", b"two"]
        assert _served(writer) == {"replica": before["replica"] + 1, "primary": before["primary"]}
        assert [e.payload for e in await reader.read("a")] == [b"one", b"two"]
        health = await writer.health()
        assert health.ok and health.detail["replica"] == {"reads": _served(writer)}
    finally:
        await writer.close()
        await reader.close()


async def test_a_conflict_makes_the_other_writers_append_visible(pair: ReplicaPair) -> None:
    """A writer that loses a race learns of the winner's append: its next read must
    include it, even from a lagging replica (else it would retry against stale state)."""
    first = _backend(pair)
    second = _backend(pair)
    try:
        await first.append(request("a", 0, b"one"))
        pair.caught_up()
        assert await second.read("a")  # served by the replica
        pair.pause()
        await first.append(request("a", 1, b"first wins"))
        with pytest.raises(ConflictError):
            await second.append(request("a", 1, b"second loses"))
        assert [e.payload for e in await second.read("a")] == [b"one", b"first wins"]
    finally:
        pair.resume()
        await first.close()
        await second.close()


async def test_the_feed_is_served_from_the_replica_without_gaps(pair: ReplicaPair) -> None:
    writer = _backend(pair)
    follower = _backend(pair)
    try:
        for i in range(5):
            await writer.append(request(f"agent-{i}", 0, f"e{i}".encode()))
        pair.caught_up()
        records = await follower.read_feed(0, 100)
        assert [r.event.payload for r in records] == [f"e{i}".encode() for i in range(5)]
        assert _served(follower)["replica"] == 1
        # lagging replica: the feed still delivers what the primary committed
        pair.pause()
        await writer.append(request("agent-0", 1, b"late"))
        after = records[-1].position
        more = await follower.read_feed(after, 100)
        assert [r.event.payload for r in more] == [b"late"]
        assert _served(follower)["primary"] == 1
        pair.resume()
        pair.caught_up()
        assert await follower.read_feed(more[-1].position, 100) == []
        assert [r.event.payload for r in await follower.read_feed(0, 100)][-1] == b"late"
    finally:
        await writer.close()
        await follower.close()


async def test_a_replica_that_is_down_sends_reads_to_the_primary(pair: ReplicaPair) -> None:
    backend = _backend(pair)
    try:
        await backend.append(request("a", 0, b"one"))
        pair.stop_replica()
        assert [e.payload for e in await backend.read("a")] == [b"one"]
        assert await backend.count_agents() == 1
        assert _served(backend)["primary"] >= 1
    finally:
        await backend.close()


async def test_a_store_with_a_replica_url_saves_and_loads(pair: ReplicaPair) -> None:
    url = f"{pair.primary.dsn}?schema=agents&replica_url={quote(pair.replica_dsn, safe='')}"
    async with StateStore(url) as store:
        for step in range(3):
            await store.save("team/agent-1", {"step": step})
            assert (await store.load("team/agent-1")).data == {"step": step}
        pair.caught_up()
        loaded = await asyncio.gather(*(store.load("team/agent-1") for _ in range(3)))
        assert all(state.data == {"step": 2} for state in loaded)


async def test_the_feed_on_a_standby_itself_is_refused_with_the_way_out(
    pair: ReplicaPair,
) -> None:
    """Opened directly on the standby (read-only), loads work, but the feed's frontier
    cannot be read there (the primary's appends in flight are invisible): a typed error
    says to open the primary with replica_url= instead — never a feed that skips."""
    writer = _backend(pair)
    await writer.append(request("a", 0, b"one"))
    await writer.close()
    pair.caught_up()
    standby = PostgresBackend(pair.replica_dsn, schema="agents", max_size=2, readonly=True)
    try:
        assert [e.payload for e in await standby.read("a")] == [b"one"]
        with pytest.raises(ConfigurationError, match="replica_url"):
            await standby.read_feed(0, 10)
    finally:
        await standby.close()


def _freeze_replica(pair: ReplicaPair) -> list[int]:
    """SIGSTOP the replica's postmaster and its children (sockets open, no answer)."""
    with open(os.path.join(pair.data, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = subprocess.run(
        ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
    ).stdout.split()
    frozen = [postmaster, *map(int, children)]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    return frozen


async def test_a_frozen_replica_sends_reads_to_the_primary_within_socket_timeout(
    pair: ReplicaPair,
) -> None:
    """Before, a read sent to a replica that stopped answering (SIGSTOP) never returned:
    only a failed connection sent reads to the primary, and a frozen server fails none."""
    backend = PostgresBackend(
        pair.primary.dsn,
        schema="agents",
        max_size=2,
        replica_url=pair.replica_dsn,
        retry_timeout=5,
        connect_timeout=2,
        socket_timeout=0.5,
    )
    try:
        await backend.append(request("a", 0, b"one"))
        await asyncio.to_thread(pair.caught_up)
        assert [e.payload for e in await backend.read("a")] == [b"one"]
        frozen = _freeze_replica(pair)
        try:
            # (the bound only turns the old hang into a failure)
            read = await asyncio.wait_for(backend.read("a"), 240)
        finally:
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        assert [e.payload for e in read] == [b"one"]
        assert _served(backend)["primary"] >= 1
    finally:
        await backend.close()
