"""A lossy Redis failover under a running process that keeps a witness: the master
acknowledged seq 4 of an agent and failed before its replica had it, the replica was
promoted, and another process saved the agent again — a *different* event at seq 4.

Before, the process that acknowledged seq 4, its cache no longer holding the agent,
loaded the other process's state without an error although its own witness held the
mark of the lost record; its next save wrote on top, and the mark of that save replaced
the lost record's in the witness file, so a process opening the store later with that
file found nothing either: two contents for one ``(agent, seq)``, no error anywhere.
Now the state read from storage is checked against the witness's mark
(:mod:`statekeeper.security.held`): the load and the save raise ``RollbackDetected``
naming the witness, nothing is written, and the file keeps the mark, so the process
opening the store later is told too.

Private ``redis-server`` processes: a master and its replica; the replica's link is
awaited as a condition; the promoted replica's data is then served at the master's
address (its dump loaded by a server started there), as a client that follows the
failover (Sentinel, a proxy, DNS) finds it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected

from ._services import PrivateRedis, private_redis

pytestmark = pytest.mark.slow


def _run(port: int, *args: object) -> Any:
    """A command on the private server at ``port``."""
    with redis.Redis(port=port) as client:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]


@pytest.fixture
def servers() -> Iterator[tuple[PrivateRedis, PrivateRedis]]:
    with private_redis() as master, private_redis() as replica:
        _run(replica.port, "REPLICAOF", "127.0.0.1", str(master.port))
        for _ in range(3000):  # (a condition: the master sees its replica; WAIT blocks)
            _run(master.port, "SET", "sk-probe", "1")
            if int(_run(master.port, "WAIT", 1, 100)) >= 1:
                break
        else:
            raise AssertionError("the replica never connected")
        yield master, replica


def _fail_over(master: PrivateRedis, replica: PrivateRedis) -> None:
    """The master dies; the promoted replica's data is served at the master's address."""
    _run(replica.port, "SAVE")
    master.kill()
    shutil.copy(os.path.join(replica.dir, "dump.rdb"), os.path.join(master.dir, "dump.rdb"))
    replica.kill()
    master.start()


@pytest.mark.parametrize("first", ["load", "save"])
async def test_a_lost_seq_written_again_elsewhere_is_detected_by_the_witness(
    servers: tuple[PrivateRedis, PrivateRedis], tmp_path: Path, first: str
) -> None:
    master, replica = servers
    url = f"{master.url}?prefix=t:&retry_timeout=30"
    witness = tmp_path / "witness"
    store = StateStore(url, witness=witness, cache_size=1)
    try:
        for n in range(1, 4):
            await store.save("a", {"n": n})
        await store.save("b", {"n": 1})
        _run(master.port, "WAIT", 1, 0)  # seq 1..3 (and b) on the replica
        _run(replica.port, "REPLICAOF", "NO", "ONE")  # its link lost: promoted
        assert (await store.save("a", {"n": 4})).last_seq == 4  # acknowledged, lost
        assert store.witness is not None
        await store.witness.flush()  # (written at most 1 s later anyway)
        await store.load("b")  # the cache (one state) no longer holds a
        _fail_over(master, replica)
        async with StateStore(url, witness=False) as other:
            await other.save("a", {"n": "other 4"})  # another event at seq 4
        with pytest.raises(RollbackDetected, match="record at seq 4 is not the one") as caught:
            if first == "load":
                await store.load("a")
            else:
                await store.save("a", {"n": 5})
        assert (caught.value.agent_id, caught.value.seq) == ("a", 4)
        assert caught.value.witness == str(witness)
    finally:
        await store.close()
    async with StateStore(url, witness=False) as look:
        state = await look.load("a")
        assert (state.seq, state.data) == (4, {"n": "other 4"})  # nothing written on top
    async with StateStore(url, witness=witness) as later:  # a process opening it later
        with pytest.raises(RollbackDetected, match="seq 4"):
            await later.load("a")
