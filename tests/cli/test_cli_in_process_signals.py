"""A backup run in-process leaves the process's Ctrl-C handling as it found it.

``statekeeper backup`` ignores Ctrl-C and SIGTERM once the backup is in place (a late
signal would only report a failure after it succeeded). As the ``statekeeper`` process
that lasts to its exit; run in-process, :func:`statekeeper.cli.main` puts the handlers
back. The typer ``app`` called directly (typer's ``CliRunner``, an application that
embeds the commands) has no ``main`` to do it: before, the calling process went on
ignoring Ctrl-C for good (found when a later test's ``KeyboardInterrupt`` never came).
"""

from __future__ import annotations

import signal
from pathlib import Path

from typer.testing import CliRunner

from statekeeper.cli import app, main


def _backup(tmp_path: Path, url: str, name: str) -> list[str]:
    to, key = tmp_path / f"{name}.skb", tmp_path / f"{name}.key"
    return ["backup", "--db", url, "--to", str(to), "--backup-key", str(key), "--create-backup-key"]


def test_the_typer_app_run_in_process_keeps_the_callers_handlers(
    runner: CliRunner, url: str, tmp_path: Path
) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    made = runner.invoke(app, _backup(tmp_path, url, "b"))
    assert made.exit_code == 0, made.output
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_main_run_in_process_puts_the_handlers_back(url: str, tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        main(_backup(tmp_path, url, "m"))
    except SystemExit as exc:
        assert exc.code == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
