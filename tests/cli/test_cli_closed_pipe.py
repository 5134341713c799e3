"""A reader that stops reading (``statekeeper agents | head -1``) ends the command at
once and quietly, with one exit code (141, as a program killed by SIGPIPE), whatever
writes the output: rich tables, JSON, JSON Lines. Before, the same closed pipe gave exit
code 1 with nothing said (rich's own handling), or ``error: Broken pipe`` and exit code
2 (a user error), depending on the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._subprocess import cli_env

COMMANDS = [
    ("agents",),
    ("stats",),
    ("history", "alpha"),
    ("show", "alpha", "--json"),
    ("agents", "--json"),
    ("export",),
    ("tail",),
]


def _with_stdout_closed(args: tuple[str, ...], db: Path) -> subprocess.CompletedProcess[bytes]:
    """``statekeeper ARGS --db DB`` whose stdout is a pipe nobody reads: its read end is
    closed before the command starts, so its first write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "statekeeper.cli", *args, "--db", str(db)],
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=cli_env(),
            timeout=120,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_stdout_ends_the_command_quietly_with_exit_code_141(
    args: tuple[str, ...], db: Path
) -> None:
    before = db.read_bytes()
    result = _with_stdout_closed(args, db)
    assert result.returncode == 141, result
    assert result.stderr == b"", result.stderr.decode()
    assert db.read_bytes() == before
