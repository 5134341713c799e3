"""``statekeeper bench``: the seed's performance table, measured on this machine.

The measuring lives in :mod:`statekeeper.bench.seed` (see there for what is measured);
this module wires it to options, shows progress and renders the rows.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from . import render
from ._markup import escape
from ._table import titled_table
from .app import JsonOption, app, err_console, handled, out_console, run

if TYPE_CHECKING:  # (imported where used: ``statekeeper --help`` stays fast)
    from rich.table import Table

    from ..bench.seed import BenchRow

__all__ = ["bench"]


_VERDICT_SHORT = {
    "faster than claimed": "[green]faster[/]",
    "within the claim": "[green]within[/]",
    "slower than claimed": "[yellow]slower[/]",
}


def _table(rows: list[BenchRow], agents: int, saves: int, width: int = 80) -> Table:
    """The result table; the engine column only on terminals of 120+ columns, and the
    reasons a strategy was skipped as numbered notes under the table (so nothing is
    cut at 80 columns)."""
    wide = width >= 120
    table = titled_table(f"{agents} agents x {saves} saves, then as many loads (latency in ms)")
    columns = [("strategy", "left")]
    if wide:
        columns.append(("engine", "left"))
    columns += [
        ("save\np50", "right"),
        ("save\np99", "right"),
        ("load\np50", "right"),
        ("load\np99", "right"),
        ("seed's\nclaim", "right"),
        ("\nverdict", "left"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    notes: list[str] = []

    def ms(value: float | None) -> str:
        return "—" if value is None else (f"{value:.3f}" if value < 10 else f"{value:.1f}")

    for row in rows:
        claim = ""
        if row.claim_ms is not None:
            low, high = row.claim_ms
            claim = f"<{high:g}" if low == 0 else f"{low:g}–{high:g}"
        head = [row.strategy, *([row.engine] if wide else [])]
        if row.skipped:
            notes.append(f"{row.strategy}: {row.skipped}")
            table.add_row(*head, "", "", "", "", claim, f"[yellow]skipped ({len(notes)})[/]")
            continue
        table.add_row(
            *head,
            ms(row.save_p50),
            ms(row.save_p99),
            ms(row.load_p50),
            ms(row.load_p99),
            claim,
            _VERDICT_SHORT.get(row.verdict, row.verdict),
        )
    if notes:
        table.caption = "\n".join(
            f"({i}) skipped {escape(note)}" for i, note in enumerate(notes, 1)
        )
        table.caption_justify = "left"
    return table


@app.command("bench")
@handled
def bench(
    agents: Annotated[int, typer.Option("--agents", min=1, help="Agents per strategy.")] = 10,
    saves: Annotated[
        int, typer.Option("--saves", min=2, help="Saves per agent (then as many loads).")
    ] = 50,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="NAME",
            help="Run only this strategy (repeatable): in-memory, redis, postgresql, "
            "event, s3, hybrid or local.",
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis",
            metavar="URL",
            envvar="STATEKEEPER_REDIS_URL",
            help="Redis server URL (redis://host:6379/0).",
        ),
    ] = None,
    postgres_url: Annotated[
        str | None,
        typer.Option(
            "--postgres",
            metavar="DSN",
            envvar="STATEKEEPER_POSTGRES_URL",
            help="PostgreSQL DSN (postgresql://user@host/db).",
        ),
    ] = None,
    s3_url: Annotated[
        str,
        typer.Option(
            "--s3",
            metavar="URL",
            envvar="STATEKEEPER_S3_URL",
            help="An S3 URL (s3://bucket/prefix?endpoint_url=URL), or 'auto' to "
            "start a moto server on loopback, or 'off'.",
        ),
    ] = "auto",
    json_out: JsonOption = False,
) -> None:
    """Measure save/load latency per storage strategy vs the seed's claims."""
    from ..bench.seed import (
        STRATEGIES,
        moto_server,
        run_bench,
        strategy_key,
        unknown_strategies,
    )

    unknown = unknown_strategies(only)
    if unknown:
        valid = ", ".join(dict.fromkeys(strategy_key(s) for s in STRATEGIES))
        raise typer.BadParameter(
            f"unknown strategy {unknown[0]!r}; choose from {valid}", param_hint="'--only'"
        )

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    async def go(s3: str | None) -> list[BenchRow]:
        progress = Progress(
            TextColumn("[bold]{task.description:<20}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console(),
            transient=True,
            disable=json_out,
        )
        with progress:
            return await run_bench(
                agents=agents,
                saves=saves,
                only=only,
                redis_url=redis_url,
                postgres_url=postgres_url,
                s3_url=s3,
                progress=progress,
            )

    with contextlib.ExitStack() as stack:
        s3: str | None = None
        if s3_url == "auto":
            wants_s3 = not only or any(o.lower() in ("s3", "s3 archival") for o in only)
            endpoint = stack.enter_context(moto_server()) if wants_s3 else None
            if endpoint is not None:
                os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
                os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
                os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
                s3 = f"s3://{{tag}}/bench?endpoint_url={endpoint}&create_bucket=1"
        elif s3_url != "off":
            s3 = s3_url
        rows = run(go(s3))
    if json_out:
        render.print_json(
            {
                "agents": agents,
                "saves_per_agent": saves,
                "unit": "ms",
                "rows": [asdict(r) for r in rows],
            }
        )
    else:
        console = out_console()
        console.print(_table(rows, agents, saves, console.width))
