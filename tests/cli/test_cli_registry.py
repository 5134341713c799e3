"""The root group loads command modules on first use (issue 11, start-up): the table
in ``statekeeper.cli.registry`` must match the commands the modules really define, and
``--help`` / one command must import only what they need (checked in subprocesses)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import typer
from typer.core import TyperGroup

from statekeeper.cli import app
from statekeeper.cli._help import HelpGroup, load_all
from statekeeper.cli.registry import COMMANDS

from ._proc import imported

COMMAND_MODULES = sorted({f"statekeeper.cli.{e.module}" for e in COMMANDS.values()})


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n", 1)[0].split())


def _loaded_root() -> HelpGroup:
    root = load_all(typer.main.get_command(app))
    assert isinstance(root, HelpGroup)
    return root


def test_every_command_is_in_the_table_and_every_row_is_a_command() -> None:
    root = _loaded_root()
    assert set(root.commands) == set(COMMANDS)


def test_each_row_names_the_defining_module_and_the_real_help_line() -> None:
    root = _loaded_root()
    for name, entry in COMMANDS.items():
        command = root.commands[name]
        module = importlib.import_module(f"statekeeper.cli.{entry.module}")
        if isinstance(command, TyperGroup):
            typer_apps = [v for v in vars(module).values() if isinstance(v, typer.Typer)]
            assert any(t.info.name == name for t in typer_apps), (name, entry.module)
        else:
            assert command.callback is not None
            assert command.callback.__module__ == module.__name__, name
        assert _first_paragraph(command.help) == " ".join(entry.help.split()), name


def test_root_help_lists_the_same_lines_before_and_after_loading() -> None:
    def root_help() -> str:
        group = typer.main.get_command(app)
        ctx = typer.Context(group, info_name="statekeeper", terminal_width=80)
        return group.get_help(ctx)

    lazy = root_help()
    _loaded_root()
    assert root_help() == lazy
    assert lazy.index("  init ") < lazy.index("  agents ") < lazy.index("  bench ")


def test_help_imports_no_command_module_and_no_rich() -> None:
    modules = imported("--help")
    for name in [*COMMAND_MODULES, "rich", "asyncio", "statekeeper.store"]:
        assert name not in modules, name


def test_one_command_imports_only_its_own_module() -> None:
    modules = imported("diagram", "--help")
    assert "statekeeper.cli.diagram" in modules
    others = [m for m in COMMAND_MODULES if m != "statekeeper.cli.diagram"]
    assert not [m for m in others if m in modules]


def test_a_mistyped_command_still_suggests_the_right_one() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "agnets"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Did you mean 'agents'?" in result.stderr
