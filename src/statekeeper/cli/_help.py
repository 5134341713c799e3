"""Help text conventions for every command: plain metavars (``AGENT``, ``N``, ``PATH``)
instead of typer's type labels (``{agent}``, ``<int range>``, ``<list[str]>``).

:class:`HelpGroup` is the root group's class: once typer has built the command tree,
it walks it and gives every parameter without an explicit ``metavar`` a plain one, so
commands added later by any module follow the same convention without repeating it.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

__all__ = ["HelpGroup", "polish"]

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
    """The root group: polishes the whole command tree once it is built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        polish(self)
