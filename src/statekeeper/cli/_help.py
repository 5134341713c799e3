"""The root command group: commands loaded on first use, and one help convention.

Loading: the root group lists the commands of :data:`.registry.COMMANDS` without
importing their modules; the module that defines a command is imported when that
command (or its ``--help``) runs, so ``statekeeper --help`` imports none of them.

Help: every parameter without an explicit ``metavar`` gets a plain one (``AGENT``,
``N``, ``PATH``) instead of typer's type labels (``{agent}``, ``<int range>``,
``<list[str]>``), so commands added by any module follow the same convention.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from . import exits
from .namespacing import gate_commands
from .registry import COMMANDS

__all__ = ["HelpGroup", "load_all", "polish"]

#: ``ctx.meta`` key: True while the root group writes the command list of its help
_LISTING = "statekeeper.cli.listing"

#: typer's type label -> the metavar shown in help
_LABELS = {
    "int": "N",
    "int range": "N",
    "float": "NUMBER",
    "float range": "NUMBER",
    "str": "TEXT",
    "path": "PATH",
    "datetime": "TIME",
}


def _label(param: Any, ctx: Any) -> str:
    try:
        raw = str(param.display_type(ctx) or "")
    except Exception:  # pragma: no cover - a parameter type typer cannot describe
        raw = ""
    raw = raw.strip("<>")
    if raw.startswith("list[") and raw.endswith("]"):
        raw = raw[5:-1]
    if "|" in raw:
        return "[" + raw + "]"
    return _LABELS.get(raw, raw.upper() or "VALUE")


def _usage_name(param: Any) -> Any:
    def name() -> str:
        return str(param.metavar) if param.required else f"[{param.metavar}]"

    return name


def polish(command: Any, ctx: Any = None) -> None:
    """Set plain metavars on ``command`` and every subcommand (in place)."""
    for param in getattr(command, "params", ()):
        if param.param_type_name == "argument":
            if param.metavar is None:
                name = param.name or "value"
                if param.nargs != 1 and name.endswith("_ids"):
                    name = name[: -len("_ids")]  # agent_ids -> AGENT...
                param.metavar = name.upper()
                if param.nargs != 1:
                    param.metavar += "..."
            # the metavar says it all: no "AGENT <str>" in the help list, no "{AGENT}"
            param.display_type_rich = lambda ctx=None: None
            param._usage_display_name = _usage_name(param)
        elif param.param_type_name == "option":
            if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
                continue
            if param.metavar is None:
                param.metavar = _label(param, ctx)
    for sub in getattr(command, "commands", {}).values():
        polish(sub, ctx)


class HelpGroup(TyperGroup):
    """The root group: loads each command's module on first use (:data:`COMMANDS`) and
    polishes the help of every command it holds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        polish(self)
        for name, command in self.commands.items():
            gate_commands(command, name)  # --namespace: honoured or refused

    # A Ctrl-C outside a command's own code (its arguments parsed, its module imported
    # on first use) reaches typer, which turns it into a silent exit 130: said here, as
    # a command's own interruption is (.exits.report: "interrupted").

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise typer.Exit(exits.report(exc)) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise typer.Exit(exits.report(exc)) from None

    def list_commands(self, ctx: Any) -> list[str]:
        loaded = [name for name in list(self.commands) if name not in COMMANDS]
        return [*COMMANDS, *loaded]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in COMMANDS:
            if ctx.meta.get(_LISTING):  # the command list of --help: the table's line will do
                return TyperCommand(cmd_name, help=COMMANDS[cmd_name].help)
            self._load(COMMANDS[cmd_name].module)
            command = self.commands.get(cmd_name)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # on the run's context, not on the group: the group serves every run of a
        # process (.app.command), a run on another thread included
        ctx.meta[_LISTING] = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            ctx.meta[_LISTING] = False

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in COMMANDS and args[0] not in self.commands:
            self.load_all()  # an unknown name: "did you mean" needs every name
        return super().resolve_command(ctx, args)

    def load_all(self) -> None:
        """Import every command's module (for tools that walk the whole tree)."""
        for module in dict.fromkeys(entry.module for entry in COMMANDS.values()):
            self._register(module)
        self._adopt()  # one tree built for them all

    def _load(self, module_name: str) -> None:
        self._register(module_name)
        self._adopt()

    def _register(self, module_name: str) -> None:
        """Import the module (its commands register on ``app``) and add its groups."""
        from .app import app

        module = importlib.import_module(f"{__package__}.{module_name}")
        registered = {info.typer_instance for info in app.registered_groups}
        for entry in COMMANDS.values():
            if entry.module == module_name and entry.group is not None:
                sub = getattr(module, entry.group)
                if sub not in registered:
                    app.add_typer(sub)

    def _adopt(self) -> None:
        """Hold every command registered on ``app`` so far."""
        from .app import command

        # typer builds click commands from what is registered on ``app`` now (the
        # tree the next run reuses: .app.command)
        for name, built in command().commands.items():
            if name not in self.commands:
                gate_commands(built, name)  # --namespace: honoured or refused
                self.commands[name] = built


def load_all(group: Any) -> Any:
    """``group`` (the root group) with every command loaded; returns it."""
    if isinstance(group, HelpGroup):
        group.load_all()
    return group
