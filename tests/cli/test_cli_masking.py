"""Secrets of the URLs a command was given are masked in whatever the CLI prints."""

from __future__ import annotations

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
