"""``statekeeper repair``: rebuild damaged snapshots from the verified events.

A dry run by default (nothing is written); ``--apply`` writes. Exit codes:

* ``0`` — nothing to repair, or (with ``--apply``) every repair was made and nothing
  else is wrong;
* ``1`` — dry run: snapshots need rebuilding (run again with ``--apply``); or, with
  ``--apply``, snapshots were left unwritten because their agent changed while repair
  ran (deleted and written again by another process): run repair again;
* ``2`` — a usage error or a library error (unreadable store, unknown key...);
* ``3`` — problems repair cannot fix remain (damaged events, heads or idempotency
  records, or snapshots of an agent whose events do not verify).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import AgentNotFound
from . import render
from ._markup import escape, escape_id
from .app import (
    DbOption,
    JsonOption,
    KeyFileOption,
    app,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)

if TYPE_CHECKING:  # (imported where used: ``statekeeper --help`` stays fast)
    from ..store.repair import RepairReport

__all__ = ["EXIT_PENDING", "EXIT_UNREPAIRABLE", "repair_command"]

#: dry run: repairs are needed (nothing was written)
EXIT_PENDING = 1
#: problems that repair cannot fix remain
EXIT_UNREPAIRABLE = 3


@app.command("repair")
@handled
def repair_command(
    ctx: typer.Context,
    agent_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Agents to repair (default: every agent).", show_default=False),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Write the repairs (default: a dry run that writes nothing)."),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Rebuild damaged snapshots from the verified events (dry run unless --apply).

    Exit 0: nothing to repair, or all repaired; 1: dry run found repairs to make, or
    an agent changed while --apply ran (run repair again); 3: problems remain that
    repair cannot fix (damaged events, heads, idempotency records); 2: usage or store
    errors.
    """
    from ..store.repair import (
        RepairReport,
        changed_meanwhile,
        head_or_none,
        repair_agent,
        vanished,
    )
    from .progress import bar

    url = resolve_url(ctx, db)

    no_key = False  # the store opened without any key: its hint says so

    async def go() -> RepairReport:
        nonlocal no_key
        total = RepairReport(applied=apply)
        async with open_store(url, key_file=key_file, readonly=not apply) as store:
            no_key = getattr(store.codec, "keyring", None) is None
            if agent_ids:
                for agent_id in agent_ids:
                    if await head_or_none(store, agent_id) == 0:
                        raise AgentNotFound(agent_id)
                count = len(agent_ids)
            else:
                count = await store.count_agents()
            with bar("repairing" if apply else "checking", disable=json_out) as progress:
                task = progress.add_task("repair", total=count)

                async def each() -> Any:
                    if agent_ids:
                        for a in agent_ids:
                            yield a
                    else:
                        async for info in store.iter_agents():
                            yield info.agent_id

                seen: set[str] = set()
                async for agent_id in each():
                    total.add(await repair_agent(store, agent_id, apply=apply))
                    seen.add(agent_id)
                    progress.advance(task)
            if not agent_ids:  # and those gone from every listing, as verify names them
                total.unrepairable.extend(await vanished(store, seen))
        return total

    report = run(go())
    damaged = [p for p in report.unrepairable if not changed_meanwhile(p)]
    if json_out:
        render.print_json(
            {
                "applied": report.applied,
                "ok": report.ok,
                "agents": report.agents,
                "events": report.events,
                "snapshots": report.snapshots,
                "changes": [
                    {"agent_id": c.agent_id, "seq": c.seq, "action": c.action, "reason": c.reason}
                    for c in report.changes
                ],
                # (what the text's summary counts: written, and left for another run)
                "rebuilt": len(report.changes) if report.applied else 0,
                "not_written": len(report.run_again),
                "unrepairable": render.problems_json(damaged),
                "run_again": render.problems_json(report.run_again),
            }
        )
    else:
        _print(report, no_key=no_key)
    if damaged:
        raise typer.Exit(EXIT_UNREPAIRABLE)
    if report.run_again or (report.changes and not apply):
        raise typer.Exit(EXIT_PENDING)


def _print(report: RepairReport, *, no_key: bool = False) -> None:
    from rich.table import Table

    console = out_console()
    summary = (
        f"{report.agents} agent(s), {report.events} event(s), "
        f"{report.snapshots} snapshot(s) checked"
    )
    if report.changes:
        verb = "Rebuilt" if report.applied else "Would rebuild (dry run, nothing written)"
        table = Table(title=verb, title_justify="left", title_style="bold")
        table.add_column("agent", style="bold", overflow="fold")
        table.add_column("seq", justify="right")
        table.add_column("was", style="yellow", overflow="fold")
        for change in report.changes:
            table.add_row(escape_id(change.agent_id), str(change.seq), escape(change.reason))
        console.print(table)
    again = report.run_again
    damaged = [p for p in report.unrepairable if p not in again]
    if damaged:
        table = render.problems_table(damaged)
        keyed = render.key_problems(damaged)
        table.title = (
            "Not repairable (restore from a backup)"
            if not keyed
            else "Not readable with the keys given"
            if len(keyed) == len(damaged)
            else "Not repairable (the right keys, else a backup)"
        )
        console.print(table)
    if again:  # not damage: the agent changed under repair (deleted, written again)
        table = render.problems_table(again)
        table.title = "Not written: the agent changed while repair ran (run repair again)"
        console.print(table)
    n = len(report.changes)
    if not report.changes and report.ok:
        console.print(f"[green]✓ nothing to repair[/] — {summary}")
    elif report.applied and not n:  # (not "✓ rebuilt 0": every one unwritten, or unfixable)
        console.print(f"[yellow]nothing rebuilt[/] — {summary}")
    elif not n:  # a dry run finding only what repair cannot fix: --apply would do nothing
        console.print(f"[yellow]nothing to rebuild[/] — {summary}")
    elif report.applied:
        console.print(f"[green]✓ rebuilt {n} snapshot(s)[/] — {summary}")
    else:
        console.print(
            f"[yellow]{n} snapshot(s) to rebuild[/] — {summary}; run again with --apply to write"
        )
    if again:
        console.print(
            f"[yellow]{len(again)} snapshot(s) not written: their agent changed while "
            "repair ran; run repair again[/]"
        )
    if damaged:
        console.print(f"[bold red]✗ {len(damaged)} problem(s) repair cannot fix[/]")
        hint = render.key_hint(damaged, no_key=no_key)
        if hint is not None:
            console.print(f"[yellow]{escape(hint)}[/]")
