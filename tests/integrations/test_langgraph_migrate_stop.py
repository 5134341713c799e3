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
from pathlib import Path

import pytest

from ..cli._proc import stop_at_gate
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
    code_, _, err = stop_at_gate(["-c", child_code], blocked, go, signum, columns=200)
    assert (code_, err) == (code, said)
    # the next run copies the rest and verifies every thread
    again = _run(*argv, "--json")
    assert again.returncode == 0, again.stderr
    assert f'"threads_verified": {len(threads)}' in again.stdout
