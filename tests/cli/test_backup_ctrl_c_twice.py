"""``statekeeper backup`` whose writing thread its stop cannot reach (a write the kernel
does not give back: a stalled network file system): Ctrl-C twice ends the command,
exit 130, with no traceback (and one line saying the thread still runs and what it
holds).

Before, the command hung whatever came: the first Ctrl-C asked the thread to stop and
waited for it; the second ended ``asyncio.run``, whose clean-up cancelled the task
again, which waited again (and then for asyncio's default executor, the thread's)."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from statekeeper import StateStore

from ._subprocess import cli_env

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)
_EXIT = 20  # (the same: the command ends on the loop's next turn)

#: the CLI with every write of a backup's thread held for ever (the loop's own writes
#: go on: the file's header), its stop never reaching it (said when asked)
_DRIVER = """
import signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)  # (as in a terminal)
from statekeeper.governance.backup.fileformat import FrameWriter
real, never = FrameWriter._write, threading.Event()
def held(self, data):
    if threading.current_thread() is threading.main_thread():
        return real(self, data)
    print("HELD", flush=True)
    never.wait()
FrameWriter._write = held
stop = FrameWriter.stop
def stopping(self):
    stop(self)
    print("STOPPING", flush=True)  # (the first Ctrl-C reached the backup)
FrameWriter.stop = stopping
from statekeeper.cli.app import main
sys.argv = ["statekeeper", *sys.argv[1:]]
main()
"""


class _Lines:
    """The child's stdout line by line, each wait bounded (its own buffer: a text
    pipe's reads ahead, and ``select`` then sees nothing of what it holds)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def until(self, prefix: str, deadline: float) -> bool:
        """Whether a line starting with ``prefix`` came before ``deadline``."""
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.decode().startswith(prefix):
                    return True
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return False
            got = os.read(self.fd, 4096)
            if not got:
                return False
            self.buffer += got


async def _filled(db: Path) -> None:
    async with StateStore(f"sqlite:///{db}") as store:
        for i in range(5):
            await store.save(f"a{i}", {"i": i})


def test_ctrl_c_twice_ends_a_backup_whose_thread_is_stuck(tmp_path: Path) -> None:
    db, out, key = tmp_path / "s.db", tmp_path / "out", tmp_path / "backup.key"
    out.mkdir()
    asyncio.run(_filled(db))
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    args = [f"sqlite:///{db}", "--to", str(out / "b.skb"), "--backup-key", str(key)]
    proc = subprocess.Popen(
        [sys.executable, str(driver), "backup", *args, "--create-backup-key"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    lines = _Lines(proc)
    try:
        assert lines.until("HELD", time.monotonic() + _WAIT)
        proc.send_signal(signal.SIGINT)
        # (two signals sent at once are one: the second once the first has landed)
        assert lines.until("STOPPING", time.monotonic() + _WAIT)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=_EXIT)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 130, "Ctrl-C twice did not end the command"
        assert proc.stderr is not None
        said = proc.stderr.read().decode()
        assert "Traceback" not in said and "interrupted" in said, said
        # (the line naming the thread is said when the clean-up's cancel meets it: not
        # yet every run, see the branch's report)
        assert "still runs" not in said or "b.skb" in said, said
        # nothing placed, and its temporary file removed at the exit (the thread's
        # clean-up never ran: a daemon, killed)
        assert sorted(out.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert _backup_again(args, key) == 0
    assert sorted(p.name for p in out.iterdir()) == ["b.skb"]


def _backup_again(args: list[str], key: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "backup", *args],
        env=cli_env(),
        capture_output=True,
        timeout=_WAIT,
        check=False,
    )
    return done.returncode if key.exists() else -1
