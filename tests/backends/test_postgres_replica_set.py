"""Read replicas behind one ``replica_url=`` that names several standbys (a multi-host
URL, a load balancer's read-only service): each server has its own replay position.

Before, the replay position seen on one standby was taken as every standby's, and the
read-your-writes floor was forgotten once one standby had replayed it: after a failover
of the read URL to another (lagging) standby the writer read its own writes back older,
with no error. The tests start their own primary and two standbys (see
``test_postgres_replica.py``); lag is made by pausing replay, never by a duration.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres import replica as replica_module

from ._services import free_port
from .test_postgres_replica import ReplicaPair, _backend, request

pytestmark = pytest.mark.slow


class Standby:
    """A second streaming standby of ``pair``'s primary."""

    def __init__(self, pair: ReplicaPair) -> None:
        self.pair = pair
        self.port = free_port()
        self.data = os.path.join(pair.primary.dir, "standby2")
        primary = pair.primary
        subprocess.run(
            [
                *primary._as,
                f"{pair.bindir}/pg_basebackup",
                "-h",
                "127.0.0.1",
                "-p",
                str(primary.port),
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
            f"-p {self.port} -k {primary.dir} -c listen_addresses=127.0.0.1",
            "-l",
            os.path.join(primary.dir, "standby2.log"),
            "start",
        )

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.pair.primary._as, f"{self.pair.bindir}/pg_ctl", "-D", self.data, "-w", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def execute(self, query: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(query)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ctl("-m", "immediate", "stop")


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    servers = ReplicaPair()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def servers() -> Iterator[tuple[ReplicaPair, Standby]]:
    pair = ReplicaPair()
    try:
        second = Standby(pair)
        try:
            yield pair, second
        finally:
            second.close()
    finally:
        pair.close()


async def test_a_read_url_that_moves_to_a_lagging_standby_still_reads_own_writes(
    servers: tuple[ReplicaPair, Standby], monkeypatch: pytest.MonkeyPatch
) -> None:
    pair, second = servers
    monkeypatch.setattr(replica_module, "DOWN_RETRY", 0.0)  # retry the replica at once
    # (as a load balancer or a DNS name moved to another standby would)
    both = (
        f"postgresql://postgres@/postgres?host=127.0.0.1,127.0.0.1&port={pair.port},{second.port}"
    )
    writer = PostgresBackend(
        pair.primary.dsn,
        schema="agents",
        max_size=2,
        replica_url=both,
        retry_timeout=5,
        connect_timeout=2,
    )
    try:
        await writer.append(request("a", 0, b"one"))
        pair.caught_up()
        second.execute("SELECT pg_wal_replay_pause()")  # the second standby lags
        await writer.append(request("a", 1, b"two"))
        pair.caught_up()
        # the first standby (first in the URL) has replayed the write: it answers
        assert [e.payload for e in await writer.read("a")] == [b"one", b"two"]
        assert writer._replica is not None and writer._replica.served["replica"] == 1

        pair.stop_replica()  # the read URL now leads to the lagging standby
        for _ in range(3):
            assert [e.payload for e in await writer.read("a")] == [b"one", b"two"]
        head, _, _, events = await writer.read_state("a")
        assert head == 2 and [e.payload for e in events] == [b"one", b"two"]
    finally:
        with contextlib.suppress(Exception):
            second.execute("SELECT pg_wal_replay_resume()")
        await writer.close()


async def test_a_replica_that_stopped_replaying_is_not_read(pair: ReplicaPair) -> None:
    """The server replica_url names was promoted (a failover that took another path, a
    split brain, a promote by mistake): it answers, but never replays the primary's
    writes again. Before, a read-only process (a dashboard, the inspector) opened on it
    was served the state from before the promotion for good, without a word; a server
    not in recovery is no standby, so the primary answers."""
    writer = _backend(pair)
    try:
        await writer.append(request("a", 0, b"one"))
        pair.caught_up()
        pair._ctl("promote")  # the standby leaves recovery: on its own from now on
        await writer.append(request("a", 1, b"two"))
    finally:
        await writer.close()
    reader = PostgresBackend(
        pair.primary.dsn,
        schema="agents",
        max_size=2,
        replica_url=pair.replica_dsn,
        readonly=True,
        retry_timeout=5,
        connect_timeout=2,
    )
    try:
        for _ in range(3):
            assert [e.payload for e in await reader.read("a")] == [b"one", b"two"]
        assert reader._replica is not None and reader._replica.served["replica"] == 0
    finally:
        await reader.close()
