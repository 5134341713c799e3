"""A split brain on PostgreSQL: two standbys of one primary both promoted (nothing
fenced the first before the second). What is and is not detected
(docs/backends.md, PostgreSQL, "Split brain"):

- both servers start the same WAL timeline (2), so their fencing tokens are the same
  (``2^40`` for each agent's first grant): two holders, one token — not detected (the
  timeline floor only orders a promoted server after the primary it replaced);
- both keep the store's id (replicated): the witness's store identity cannot tell them
  apart, by design (an older copy of a store is still that store);
- an agent written on both (another event at the same seq) is detected by a witness
  that marked one side's write: a process that moves to the other side with its
  witness file raises ``RollbackDetected`` on that agent (the mark's record is not the
  one stored there), at the opening and on every read of it.

Private primary and two standbys (``pg_basebackup -R``, own ports and data
directories); conditions only.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import RollbackDetected

from .test_postgres_replica import ReplicaPair
from .test_postgres_replica_set import Standby

pytestmark = pytest.mark.slow


async def test_two_promoted_standbys_what_is_detected(tmp_path: Path) -> None:
    pair = ReplicaPair()
    second = Standby(pair)
    try:
        async with StateStore(pair.primary.dsn + "?schema=agents", witness=False) as store:
            await store.save("a", {"n": 1})
            made = await store.backend.feed_id()  # (made by its first use: made here)
        pair.caught_up()
        _caught_up(pair, second)
        pair.primary._ctl("-m", "immediate", "stop")
        pair._ctl("promote")
        second._ctl("promote")
        one = pair.replica_dsn + "?schema=agents"
        two = second.dsn + "?schema=agents"

        witness = tmp_path / "witness"
        tokens, ids = [], []
        for url in (one, two):
            async with StateStore(url, witness=False) as store:
                lease = await LeaseManager(store, holder=url).acquire("job")
                tokens.append(lease.token)
                ids.append(await store.backend.feed_id())
        assert tokens == [1 << 40, 1 << 40]  # the same token on both: not detected
        assert ids == [made, made]  # the store's id on both

        async with StateStore(one, witness=witness) as store:
            await store.save("a", {"side": 1})  # seq 2, marked
        async with StateStore(two, witness=False) as store:
            await store.save("a", {"side": 2})  # seq 2 again, another event
        async with StateStore(two, witness=witness) as moved:  # its witness file taken along
            with pytest.raises(RollbackDetected, match="record at seq 2 is not the one"):
                await moved.load("a")
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            second._ctl("-m", "immediate", "stop")
        pair.close()


def _caught_up(pair: ReplicaPair, standby: Standby) -> None:
    """Wait (a condition, bounded) until ``standby`` replayed all the primary wrote."""
    import psycopg

    with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    with psycopg.connect(standby.dsn, autocommit=True) as conn:
        for _ in range(3000):
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
            ).fetchone()
            if done and done[0]:
                return
            conn.execute("SELECT pg_sleep(0.01)")
    raise AssertionError("the second standby did not catch up")
