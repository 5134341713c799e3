"""Secrets of the URLs a command was given are masked in whatever the CLI prints."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from statekeeper.cli.app import masked


def test_masked_sees_the_running_commands_db_option() -> None:
    """The CLI finds the command's own --db (typer runs on its own copy of click)."""
    app = typer.Typer()

    @app.command()
    def cmd(db: str = typer.Option(...)) -> None:
        print(masked(f"driver said: could not use {db}"))

    result = CliRunner().invoke(app, ["--db", "postgresql://u:pw-93x1@h/x"])
    assert result.exit_code == 0, result.output
    assert "pw-93x1" not in result.output
    assert "postgresql://u:***@h/x" in result.output


def _failing_app() -> typer.Typer:
    """A command (wrapped as every command is) that warns, logs a warning and fails
    with an untyped error, each quoting its --db."""
    import logging
    import warnings

    from statekeeper.cli.app import handled
    from statekeeper.errors import StatekeeperWarning

    app = typer.Typer()

    @app.command()
    @handled
    def cmd(db: str = typer.Option(...)) -> None:
        warnings.warn(StatekeeperWarning(f"careful with {db}"), stacklevel=1)
        logging.getLogger("statekeeper.test").warning("logged about %s", db)
        raise RuntimeError(f"a bug met {db}")

    return app


def test_the_debug_traceback_and_warnings_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``STATEKEEPER_DEBUG=1`` printed an internal error's traceback as is: its message
    (masked on the one line) whole, password and all; a warning said while a command
    ran was printed as is too."""
    monkeypatch.setenv("STATEKEEPER_DEBUG", "1")
    result = CliRunner().invoke(_failing_app(), ["--db", "postgresql://u:pw-Zq81t@h/x"])
    assert result.exit_code == 70, result.output
    assert "Traceback" in result.output and "RuntimeError" in result.output
    assert "warning: careful with postgresql://u:***@h/x" in result.output
    assert "pw-Zq81t" not in result.output


def test_held_log_records_are_masked_while_the_command_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    from statekeeper.cli import exits

    secret = "pw-Hd72x"
    with exits.held_warnings(lambda text: text.replace(secret, "***")) as records:
        logging.getLogger("statekeeper.test").warning("lost %s", f"redis://:{secret}@h/0")
    exits.print_warnings(records)
    err = capsys.readouterr().err
    assert "warning: lost redis://:***@h/0" in err and secret not in err
