"""A write and its audit entry are one commit: a process SIGKILLed at any point leaves
both or neither (SQLite and PostgreSQL, real child processes, real SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import AuditLog

from ..backends._services import fresh_url
from .conftest import KEYRING

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring

    url, kill_at = sys.argv[1], int(sys.argv[2])
    calls = 0

    def clock() -> float:
        # the audit log's clock is read once per entry, as the entry is made: dying
        # here is dying between the agent's append and its entry's
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return time.time()

    async def main() -> None:
        store = StateStore(
            url,
            keyring=Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}),
            principal="app",
            policy=parse_policy('[principals.app]\\nwrite = ["tenant/**"]\\n'),
            audit=Audit(clock=clock),
            witness=False,
        )
        i = 0
        while True:
            i += 1
            result = await store.save(f"tenant/a{i % 3}", {"n": i, "pad": "x" * 300})
            print(result.agent_id, result.last_seq, flush=True)

    asyncio.run(main())
    """
)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


def _run_child(
    tmp_path: Path, url: str, kill_at: int, acks_before_kill: int
) -> set[tuple[str, int]]:
    """Run the writer until it kills itself (``kill_at``: at that audit entry) or,
    with ``kill_at`` 0, until ``acks_before_kill`` saves were acknowledged and the
    test SIGKILLs it, mid-stream; the acknowledged (agent, seq) pairs."""
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, str(script), url, str(kill_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acked: set[tuple[str, int]] = set()
    assert child.stdout is not None
    try:
        for line in child.stdout:
            agent, seq = line.split()
            acked.add((agent, int(seq)))
            if kill_at == 0 and len(acked) == acks_before_kill:
                child.send_signal(signal.SIGKILL)  # wherever it is now
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        assert child.stderr is not None
        errors = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL, errors
    return acked


async def _both_or_neither(url: str, acked: set[tuple[str, int]]) -> None:
    """Every stored event has its ``save`` entry in the log and every entry its event;
    the log verifies; every acknowledged save is in both."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        events = {
            (info.agent_id, event.seq)
            async for info in store.iter_agents()
            async for event in store.history(info.agent_id)
        }
        log = AuditLog(store.backend, KEYRING)
        report = await log.verify()
        assert report.ok, report.problems
        entries = set()
        async for entry in log.entries(operation="save"):
            assert entry.outcome == "ok" and entry.agent_id is not None
            assert entry.first_seq == entry.last_seq
            assert entry.first_seq is not None
            entries.add((entry.agent_id, entry.first_seq))
        assert events, "the writer wrote nothing before it was killed"
        assert entries == events
        assert acked <= events
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [1, 2, 7])
def test_killed_between_write_and_entry_leaves_neither(
    url: str, tmp_path: Path, kill_at: int
) -> None:
    # kill_at 1: before anything was stored; the others after some saves
    acked = _run_child(tmp_path, url, kill_at, 0)
    assert len(acked) == kill_at - 1
    if kill_at == 1:
        assert asyncio.run(_count(url)) == 0  # the first save died with its entry
        return
    asyncio.run(_both_or_neither(url, acked))


async def _count(url: str) -> int:
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        return await store.count_agents()
    finally:
        await store.close()


@pytest.mark.slow
def test_killed_anywhere_while_writing_leaves_both_or_neither(url: str, tmp_path: Path) -> None:
    for _ in range(3):  # three kills of the same store, at wherever the writer is
        acked = _run_child(tmp_path, url, 0, 25)
        asyncio.run(_both_or_neither(url, acked))
