"""A process that walked away from a stuck backup thread (a second cancel:
:class:`~statekeeper.errors.ThreadStillRunning`) and then exits: the daemon thread is
killed with it, so what it was left to close never was: the backup's temporary file
and a store copy's ``sk-backup-*`` folder stayed for ever. Now they are removed at the
interpreter's exit (a removal is safe under a writer); nothing is placed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)

_DRIVER = """
import asyncio, sys, threading
from pathlib import Path
from statekeeper.errors import ThreadStillRunning
from statekeeper.governance.backup.joined import copy_folder, run_joined
from statekeeper.governance.backup.location import Location

never, inside = threading.Event(), threading.Event()

def stuck(out, folder):
    (Path(folder) / "copy.db").write_bytes(b"x")
    out.write(b"partial")
    inside.set()
    never.wait()

async def main():
    with copy_folder() as folder, Location(sys.argv[1]).writing() as out:
        print(folder, flush=True)
        task = asyncio.ensure_future(run_joined(lambda: None, stuck, out, folder))
        await asyncio.to_thread(inside.wait)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await task

try:
    asyncio.run(main())
except ThreadStillRunning:
    print("LEFT", flush=True)
"""


def test_what_a_stuck_thread_holds_is_removed_at_the_exit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(driver), str(out / "b.skb")],
        capture_output=True,
        text=True,
        timeout=_WAIT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    folder, said = done.stdout.split()
    assert said == "LEFT" and folder.startswith(str(tmp_path)), done.stdout
    assert not Path(folder).exists()
    assert sorted(out.iterdir()) == []
