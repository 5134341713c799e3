"""Ctrl-C at any moment of a ``statekeeper`` run ends with the CLI's own one line and
exit code 130, or — once the command's outcome is decided — not at all.

It used to be, by where the signal landed: during start-up (``statekeeper``'s imports,
typer's, the command table's) a Python traceback ending in ``KeyboardInterrupt`` and
death by the signal; during the import of the command's module (the CLI loads it on
first use) exit 130 and not a word (typer turned the interrupt into a silent exit);
after the command's last line (its warnings, the interpreter's exit) a traceback and
death by the signal, the command's output complete and its success unreported.

Each case stops the console script (its ``argv[0]``, its entry point) at one exact
point, a gate the child reaches (an import, a call), never after a duration.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from statekeeper.store import SyncStateStore

from ._proc import stop_at_gate

SRC = Path(__file__).resolve().parents[2] / "src"

_CHILD = """
import atexit, importlib.abc, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
blocked, go, where = Path({blocked!r}), Path({go!r}), {where!r}

def gate():
    if not blocked.exists():
        blocked.touch()
        while not go.exists():
            time.sleep(0.005)

class Gate(importlib.abc.MetaPathFinder):  # the import of one module stops at the gate
    def find_spec(self, name, path, target=None):
        if name == where:
            gate()
        return None

sys.argv[0] = "/usr/local/bin/statekeeper"  # what the console script is called
if where == "atexit":
    atexit.register(gate)
if where not in ("atexit", "print_warnings"):
    sys.meta_path.insert(0, Gate())
from statekeeper.cli import main  # (the console script's two lines)
if where == "print_warnings":  # once the command is done (its last line printed)
    from statekeeper.cli import exits
    real = exits.print_warnings
    def print_warnings(held):
        gate()
        real(held)
    exits.print_warnings = print_warnings
sys.exit(main())
"""


def _stop(tmp_path: Path, where: str, *argv: str) -> tuple[int, str, str]:
    blocked, go = tmp_path / "blocked", tmp_path / "go"
    child = _CHILD.format(src=str(SRC), blocked=str(blocked), go=str(go), where=where)
    return stop_at_gate(["-c", child, *argv], blocked, go, signal.SIGINT)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        store.save("alpha", {"n": 1})
    return path


@pytest.mark.parametrize(
    "where",
    [
        "statekeeper.errors",  # statekeeper's own first import
        "typer",  # the CLI's framework
        "statekeeper.cli.registry",  # the command table
        "statekeeper.cli.commands",  # the command's module, loaded on first use
        "statekeeper.store",  # the store, imported by the command
    ],
)
def test_ctrl_c_while_a_module_imports_ends_with_one_line_and_130(
    tmp_path: Path, db: Path, where: str
) -> None:
    code, out, err = _stop(tmp_path, where, "agents", "--db", str(db))
    assert (code, out, err) == (130, "", "error: interrupted\n")


@pytest.mark.parametrize("where", ["print_warnings", "atexit"])
def test_ctrl_c_after_the_commands_last_line_changes_nothing(
    tmp_path: Path, db: Path, where: str
) -> None:
    code, out, err = _stop(tmp_path, where, "agents", "--db", str(db))
    assert (code, err) == (0, ""), (out, err)
    assert "alpha" in out


@pytest.mark.parametrize(
    ("argv", "orig_argv", "cli"),
    [
        (["/venv/bin/statekeeper", "agents"], ["/venv/bin/python", "/venv/bin/statekeeper"], True),
        (["-m", "agents"], ["python", "-m", "statekeeper.cli", "agents"], True),
        (["-m"], ["python", "-X", "dev", "-W", "error", "-mstatekeeper.cli"], True),
        (["-m"], ["python", "-I", "-m", "pytest"], False),
        (["-c"], ["python", "-c", "import statekeeper"], False),
        (["app.py"], ["python", "app.py", "-m", "statekeeper.cli"], False),
        ([""], ["python"], False),
    ],
)
def test_only_the_statekeeper_command_gets_the_start_up_handler(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], orig_argv: list[str], cli: bool
) -> None:
    """A program that imports statekeeper keeps its own Ctrl-C (a KeyboardInterrupt)."""
    import sys

    from statekeeper import _start

    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert _start._is_the_command() is cli
