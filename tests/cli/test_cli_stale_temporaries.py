"""A command killed hard (``kill -9``, a power cut) leaves its temporary file beside
its target: a partial export (of an encrypted store: decrypted records), backup or
progress file. The next run of a command on that target removes the temporary files
of processes that are gone, never one of a live run, never a file that is not one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.store import SyncStateStore

from ._proc import cli_env, sk

_MAKE = """
import os, sys
from pathlib import Path
from statekeeper._files import new_temporary
fd, tmp = new_temporary(Path(sys.argv[1]))
os.write(fd, b'{"partial": "decrypted secret"}')
print(tmp, flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), 9)  # killed before its rename or clean-up
sys.stdin.readline()  # alive until told
os.unlink(tmp)
"""


def _temporary(target: Path, how: str) -> tuple[Path, subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _MAKE, str(target), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    return Path(proc.stdout.readline().strip()), proc


@pytest.fixture
def live(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.communicate("\n", timeout=30)


def test_a_later_export_removes_a_dead_runs_temporary_file_only(
    tmp_path: Path, live: list[subprocess.Popen[str]]
) -> None:
    db, out = tmp_path / "s.db", tmp_path / "out.jsonl"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"secret": "s3cr3t"})
    dead, proc = _temporary(out, "die")
    proc.wait(timeout=30)
    assert dead.exists() and dead.name.startswith(".out.jsonl.")
    running, proc = _temporary(out, "live")
    live.append(proc)
    others = [
        tmp_path / ".out.jsonl.0123456789ab.tmp",  # an older version's: its writer unknown
        tmp_path / ".out.jsonl.notes.tmp",
        tmp_path / "out.jsonl.tmp",
        tmp_path / ".other.jsonl.0000-1-0123456789ab.tmp",  # another target's
    ]
    for other in others:
        other.write_text("not ours to remove")

    result = sk("export", "--db", str(db), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert not dead.exists()  # the killed run's partial file (decrypted records) is gone
    assert running.exists()  # a live run's is kept
    assert all(other.exists() for other in others)
    assert '"acme/x"' in out.read_text()


def test_a_later_progress_write_removes_a_dead_runs_temporary_file(tmp_path: Path) -> None:
    from statekeeper._files import remove_stale_temporaries, write_atomically

    progress = tmp_path / "s.db.rekey.json"
    dead, proc = _temporary(progress, "die")
    proc.wait(timeout=30)
    write_atomically(progress, "{}")  # (the first write for a target in a process)
    assert not dead.exists() and progress.read_text() == "{}"
    assert remove_stale_temporaries(progress) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db.rekey.json"]
