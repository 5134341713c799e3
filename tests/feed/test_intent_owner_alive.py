"""A process settling leftover feed intents (its first delete or forget) leaves those
whose owner may still go on with them.

Before, process B's first delete dropped process A's intent when A had written it but
not yet deleted the agent (or destroyed its key): the agent was intact, so the delete
"did not happen". If A then died after that step, before its tombstone, nothing was
left to finish it: every read model kept the deleted (forgotten) agent, and ``verify``
found nothing. Now an intent names its owner (``claim_owner``) and is dropped only
once the operation is provably over or its owner provably gone.

A real second process (``_intent_child.py``) stops itself (``SIGSTOP``) once its intent
is written; the test waits for that stop (``waitpid``), settles in this process, lets
the child go on and waits for its death after the delete (no timing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.store.feed_intents import PENDING, finish_pending

from ._intent_child import backend, keyring

CHILD = Path(__file__).with_name("_intent_child.py")
DEADLINE = 120.0  # (a bound on a hung child only)


def _spawn(engine: str, where: Path, agent_id: str) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    args = [sys.executable, str(CHILD), engine, str(where), agent_id]
    return subprocess.Popen(args, cwd=root, env=env)


def _wait_stopped(child: subprocess.Popen[bytes]) -> None:
    """Until the child stopped itself (its intent written); pytest's timeout bounds a
    child that never gets there."""
    pid, status = os.waitpid(child.pid, os.WUNTRACED)
    assert pid == child.pid and os.WIFSTOPPED(status), f"the child ended first: {status}"


async def _intents(store: StateStore) -> list[str]:
    page = await store.backend.list_agents(after=PENDING, limit=100)
    return [i.agent_id for i in page if i.agent_id.startswith(PENDING)]


async def _tombstones(store: StateStore) -> list[tuple[str, int]]:
    return [(c.agent_id, c.seq) async for c in store.subscribe(stop_at_head=True) if c.deleted]


@pytest.mark.parametrize("engine", ["tiered", "split", "forget-sqlite", "forget-tiered"])
async def test_an_intent_whose_owner_is_alive_is_left_to_it(engine: str, tmp_path: Path) -> None:
    async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as store:
        for n in range(2):
            for agent_id in ("acme/gone", "b-first", "c-next"):
                await store.save(agent_id, {"n": n})
    child = _spawn(engine, tmp_path, "acme/gone")
    try:
        _wait_stopped(child)
        async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as other:
            assert len(await _intents(other)) == 1  # the child's
            assert await other.delete("b-first")  # this process's first: it settles
            assert len(await _intents(other)) == 1  # left to its owner (dropped, before)
            assert (await other.load("acme/gone")).data == {"n": 1}
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=DEADLINE) == 17  # died after the delete, before the tombstone
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as store:
        report = await store.verify()  # its intent is there to name it
        assert ("acme/gone", 2, "feed") in [(p.agent_id, p.seq, p.kind) for p in report.problems]
        assert await store.delete("c-next")  # the next delete finishes it
        assert ("acme/gone", 2) in await _tombstones(store)
        assert await finish_pending(store.backend, store.codec) == []
        assert (await store.verify()).ok
