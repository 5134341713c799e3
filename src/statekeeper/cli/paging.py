"""The command a listing tells the user to run for its next page (``more: statekeeper
agents --after ID``): the same listing, so every option the user typed that chose what
was listed is repeated — the store (``--db``, before or after the command name), the
global ``--namespace``, ``--as`` and ``--policy``, ``--key-file``, the page size.

Without them the pasted command lists another store (the default file) or another
namespace. What came from the environment is not repeated: the shell the command is
pasted into has it too. A secret is never printed: a URL is shown masked
(:func:`~statekeeper.backends.redact.mask_url`), with a note that the password must be
put back in place of ``***``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import typer

from .app import print_command

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["print_next_page"]

#: the root's options that choose what a command sees, as the user types them
_GLOBAL = (("namespace", "--namespace"), ("principal", "--as"), ("policy", "--policy"))


class _Parsed(Protocol):
    """A command's (or the root's) click context, whichever click typer runs on."""

    params: dict[str, Any]

    def get_parameter_source(self, name: str) -> Any: ...


def _typed(ctx: _Parsed, name: str) -> bool:
    """Whether the user gave option ``name`` on the command line (not its default)."""
    source = ctx.get_parameter_source(name)  # (an enum of typer's click: by its name)
    return source is not None and source.name == "COMMANDLINE"


def next_page_argv(
    ctx: typer.Context, command: str, options: dict[str, str], *argv: str
) -> tuple[list[str], bool]:
    """The arguments after ``statekeeper`` that run ``command`` again with ``argv``,
    repeating the root's options and those of ``options`` (parameter name → option) the
    user typed; and whether a secret was masked in them (the password must be put back).
    """
    from ..backends.redact import mask_url

    root = ctx.find_root()
    out: list[str] = []
    for name, opt in _GLOBAL:
        if _typed(root, name):
            out += [opt, str(root.params[name])]
    out += command.split()
    masked = False
    db = ctx.params.get("db") if _typed(ctx, "db") else None
    if db is None and _typed(root, "db"):
        db = root.params["db"]
    if db:
        shown = mask_url(str(db))
        masked = shown != db
        out += ["--db", shown]
    for name, opt in options.items():
        if _typed(ctx, name):
            out += [opt, str(ctx.params[name])]
    return [*out, *argv], masked


def print_next_page(
    console: Console, ctx: typer.Context, command: str, options: dict[str, str], *argv: str
) -> None:
    """``more: statekeeper ...`` (see :func:`next_page_argv`), with a note under it when
    the store's URL had a secret."""
    args, masked = next_page_argv(ctx, command, options, *argv)
    print_command(console, "more", *args)
    if masked:
        console.print("[dim](*** stands for the URL's password: type it in its place)[/]")
