"""Ctrl-C and SIGTERM on ``statekeeper langgraph import`` / ``export``.

The copy drives the statekeeper saver's event loop from the command's (main) thread;
a signal landing inside that loop used to kill a task half-way and print pages of
tracebacks. The command now stops between two saver calls: Ctrl-C prints the one
line other commands print (``error: interrupted``, exit 130), SIGTERM the same
(``error: terminated``, exit 143), and the next run resumes the copy.

The child blocks inside the saver's event loop (in a task's step) until the test has
sent the signal: it always lands there, the case that went wrong.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_langgraph_migrate import SRC, _init, _populate, _run

_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
from statekeeper.integrations.langgraph import saver as mod
from statekeeper.cli import main
real = mod.StatekeeperSaver._open
count = [0]
async def _open(self, *args, **kwargs):
    count[0] += 1
    if count[0] == {stop}:  # on the saver's loop, in a task: wait for the signal
        Path({blocked!r}).touch()
        while not Path({go!r}).exists():
            time.sleep(0.02)
    return await real(self, *args, **kwargs)
mod.StatekeeperSaver._open = _open
main({argv!r})
"""


@pytest.mark.parametrize(
    ("direction", "signum", "code", "said"),
    [
        ("import", signal.SIGINT, 130, "error: interrupted\n"),
        ("export", signal.SIGINT, 130, "error: interrupted\n"),
        ("import", signal.SIGTERM, 143, "error: terminated (run it again to resume the copy)\n"),
    ],
    ids=["import-ctrl-c", "export-ctrl-c", "import-sigterm"],
)
def test_a_stopped_copy_says_one_line_and_resumes(
    direction: str, signum: int, code: int, said: str, tmp_path: Path
) -> None:
    source = str(tmp_path / "lg.sqlite")
    threads = _populate(source)
    store = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    if direction == "export":
        assert _run("langgraph", "import", source, store).returncode == 0
        argv = ["langgraph", "export", store, str(tmp_path / "out.sqlite")]
    else:
        argv = ["langgraph", "import", source, store]
    blocked, go = tmp_path / "blocked", tmp_path / "go"
    child_code = _CHILD.format(src=str(SRC), stop=20, blocked=str(blocked), go=str(go), argv=argv)
    child = subprocess.Popen(
        [sys.executable, "-c", child_code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"COLUMNS": "200", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 120  # a guard, never a synchronisation
        while not blocked.exists():  # wait for the condition
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signum)
        go.touch()
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (child.returncode, err) == (code, said)
    # the next run copies the rest and verifies every thread
    again = _run(*argv, "--json")
    assert again.returncode == 0, again.stderr
    assert f'"threads_verified": {len(threads)}' in again.stdout
