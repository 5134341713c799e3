"""Crash durability of the saver's lean keyed append (store/lean.py): every checkpoint a
``put`` acknowledged — committed by ``Backend.commit_keyed``'s one statement — is stored
after the process is SIGKILLed mid-stream, and the file verifies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver

from ..lean_declines import LEAN, REASONS

HERE = Path(__file__).parent


async def _verified(url: str) -> bool:
    async with StateStore(url) as store:
        return (await store.verify()).ok


@pytest.mark.slow
def test_every_acknowledged_put_is_stored_after_a_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/crash.db"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "_lg_lean_crash_child.py"), url, "t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    acked: list[str] = []
    outcomes: list[str] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 120
        while len(acked) < 40:  # a bounded wait for the child's progress
            line = child.stdout.readline()
            assert line, f"the child ended: {child.poll()}"
            parts = line.split()
            assert len(parts) == 2, line
            acked.append(parts[0])
            outcomes.append(parts[1].replace("_", " "))
            assert time.monotonic() < deadline, f"{len(acked)} puts in 120 s"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    # every put came to the lean append: taken, or declined for its reason (how many of
    # each depends on scheduling: not counted, see tests/lean_declines.py)
    assert set(outcomes) <= REASONS | {LEAN}, outcomes
    with StatekeeperSaver.from_url(url) as saver:
        stored = {t.config["configurable"]["checkpoint_id"] for t in saver.list(None)}
    assert set(acked) <= stored
    assert asyncio.run(_verified(url))
