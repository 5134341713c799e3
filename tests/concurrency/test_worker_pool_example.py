"""The worker-pool example runs: processes claim agents with leases, one dies holding a
lease, its agent is recovered after the TTL, and every unit is recorded exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worker_pool.py"


def test_worker_pool_recovers_a_dead_workers_agent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pool.db'}"
    args = ["--url", url, "--workers", "3", "--agents", "6", "--units", "3"]
    args += ["--ttl", "1", "--crash-after", "1"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "crashed: ['w0']" in done.stdout
    assert "recovered, worked on by w0 -> " in done.stdout
    assert "OK: every unit of every agent recorded exactly once" in done.stdout
