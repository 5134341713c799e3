"""``backup`` stopped (Ctrl-C, SIGTERM) just after its file was put in place reported
"error: interrupted" (exit 130), or nothing (exit 143), or success but exit 130, or
died of the signal, while the backup was complete; a re-run was then refused ("already
exists"). Once the backup is in place the command reports it and exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.store import SyncStateStore

from ..cli._proc import stop_at_gate

SRC = Path(__file__).resolve().parents[2] / "src"

_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
from statekeeper.governance.backup import location as mod
from statekeeper.cli import main
real = mod.sync_directory
def sync_directory(folder):  # right after the backup is placed: wait for the signal
    Path({blocked!r}).touch()
    while not Path({go!r}).exists():
        time.sleep(0.02)
    real(folder)
mod.sync_directory = sync_directory
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_backup_stopped_once_in_place_is_reported_written(signum: int, tmp_path: Path) -> None:
    db, to, key = tmp_path / "s.db", tmp_path / "b.skb", tmp_path / "bk.key"
    with SyncStateStore(f"sqlite:///{db}") as store:
        for a in range(3):
            store.save(f"acme/a{a}", {"n": a})
    blocked, go = tmp_path / "blocked", tmp_path / "go"
    argv = ["backup", "--db", str(db), "--to", str(to), "--backup-key", str(key)]
    code, out, err = stop_at_gate(
        [
            "-c",
            _CHILD.format(src=str(SRC), blocked=str(blocked), go=str(go)),
            *argv,
            "--create-backup-key",
        ],
        blocked,
        go,
        signum,
    )
    assert (code, err) == (0, ""), (out, err)
    assert out.startswith("✓ ") and f"written to {to}" in out.replace("\n", " ")
    assert to.exists() and sorted(p.name for p in tmp_path.glob(".b.skb*")) == []
    # the backup is whole: it restores
    with SyncStateStore(f"sqlite:///{tmp_path / 'r.db'}"):
        pass
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "statekeeper.cli",
            "restore",
            str(to),
            "--to",
            f"sqlite:///{tmp_path / 'r.db'}",
            "--backup-key",
            str(key),
        ],
        capture_output=True,
        text=True,
        env={"COLUMNS": "300", "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert check.returncode == 0, check.stderr
