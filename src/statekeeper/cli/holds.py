"""``statekeeper hold add|remove|list``: the legal holds kept in the store.

A hold exempts an agent (``acme/alice``) or a namespace (``legal/*``) from every purge
(``forget``, ``delete``, ``retention apply``, expiry, LangGraph prune), whether or not a
policy file is passed (:mod:`statekeeper.governance.holds`). Placing and releasing one
needs ``admin`` on its namespace under ``--as`` and is recorded in the audit log (without
``--as`` too, on a store that keeps one: the entry names no principal).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from . import render
from ._markup import escape
from .app import DbOption, JsonOption, handled, out_console, resolve_url, run
from .stores import KeyFileOption, open_store, refuse_in_memory

if TYPE_CHECKING:
    from ..governance.holds import Hold

__all__ = ["hold_app"]

hold_app = typer.Typer(
    name="hold",
    help="Legal holds kept in the store: agents or namespaces exempt from every purge.",
    no_args_is_help=True,
)

PatternArgument = Annotated[
    str,
    typer.Argument(metavar="PATTERN", help="An agent id (acme/alice) or a namespace (legal/*)."),
]


def _change(
    ctx: typer.Context, pattern: str, reason: str, db: str | None, key: Path | None
) -> bool:
    from ..governance.holds import add_hold, remove_hold

    url = resolve_url(ctx, db)
    refuse_in_memory(url, f"hold {ctx.info_name}")
    adding = ctx.info_name == "add"

    async def go() -> bool:
        async with open_store(url, key_file=key, readonly=False) as store:
            if adding:
                return await add_hold(store, pattern, reason)
            return await remove_hold(store, pattern, reason)

    return run(go())


@hold_app.command("add")
@handled
def hold_add(
    ctx: typer.Context,
    pattern: PatternArgument,
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="The matter the hold is for.")
    ],
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Place a legal hold: forget, delete, retention and expiry refuse what it covers."""
    made = _change(ctx, pattern, reason, db, key_file)
    if json_out:
        render.print_json({"pattern": pattern, "placed": made})
    elif made:
        out_console().print(f"[green]✓[/] legal hold placed on {escape(pattern)!r}")
    else:
        out_console().print(f"{escape(pattern)!r} was on hold already")


@hold_app.command("remove")
@handled
def hold_remove(
    ctx: typer.Context,
    pattern: PatternArgument,
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="Why it is released (audited).")
    ] = "",
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Release a legal hold (audited; nothing happens when there was none)."""
    removed = _change(ctx, pattern, reason, db, key_file)
    if json_out:
        render.print_json({"pattern": pattern, "released": removed})
    elif removed:
        out_console().print(f"[green]✓[/] legal hold on {escape(pattern)!r} released")
    else:
        out_console().print(f"no legal hold on {escape(pattern)!r}: nothing to release")


@hold_app.command("list")
@handled
def hold_list(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the legal holds in force, oldest first."""
    from ..governance.holds import check_keys, list_holds

    url = resolve_url(ctx, db)

    async def go() -> tuple[Hold, ...]:
        async with open_store(url, key_file=key_file) as store:
            holds = await list_holds(store)
            if not holds:  # "no legal holds" only from keys that open the store
                await check_keys(store)
            return holds

    holds = run(go())
    if json_out:
        render.print_json(
            [
                {
                    "pattern": h.pattern,
                    "reason": h.reason,
                    "principal": h.principal,
                    "at": render.iso(h.at),
                    # a hold a restore carried over from a backup: which one
                    **({"restored_from": h.restored_from} if h.restored_from else {}),
                }
                for h in holds
            ]
        )
        return
    if not holds:
        out_console().print("no legal holds")
        return
    from ._table import titled_table

    table = titled_table("Legal holds")
    restored = any(h.restored_from for h in holds)
    for name in ("pattern", "reason", "placed by"):  # fold: a long id is never cut short
        table.add_column(name, overflow="fold")
    table.add_column("since (UTC)", no_wrap=True)
    if restored:  # holds carried over by a restore, kept as placed: the backup named
        table.add_column("restored from backup", overflow="fold")
    for h in holds:
        since = datetime.fromtimestamp(h.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        row = [escape(h.pattern), escape(h.reason), escape(h.principal or "-"), since]
        table.add_row(*row, *([escape(h.restored_from or "-")] if restored else []))
    out_console().print(table)
