"""The ``demo`` command: a research agent's run, crashed and resumed, on a SQLite file
(the agent itself is :mod:`statekeeper.demo`)."""

from __future__ import annotations

from typing import Annotated

import typer

from . import render
from ._markup import escape
from .app import JsonOption, app, fail, global_db, handled, out_console, print_command


@app.command()
@handled
def demo(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            "--url",
            metavar="PATH",
            help="SQLite file for the demo (a path or sqlite:/// URL) [default: "
            "./statekeeper-demo.db]. $STATEKEEPER_URL is ignored here.",
            show_default=False,
        ),
    ] = None,
    keep: Annotated[
        bool,
        typer.Option("--keep", help="Keep earlier demo runs (default: start from a fresh file)."),
    ] = False,
    kill_after: Annotated[
        int | None,
        typer.Option(
            "--kill-after",
            metavar="SEQ",
            help="SIGKILL the worker right after it commits this seq (4..22; default: random, "
            "after the first tool result).",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed for the random kill point.")
    ] = None,
    step_delay: Annotated[
        float,
        typer.Option(
            "--step-delay",
            metavar="SECONDS",
            min=0.0,
            help="Pacing between steps so the kill lands mid-run (pacing only: it stands in "
            "for no work).",
        ),
    ] = 0.1,
    snapshot_every: Annotated[
        int, typer.Option("--snapshot-every", min=1, help="Snapshot interval of the demo store.")
    ] = 8,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=1.0,
            help="Give up if the worker makes no progress this long.",
            hidden=True,
        ),
    ] = 60.0,
    simulate_amnesia: Annotated[
        bool,
        typer.Option(
            "--simulate-amnesia",
            hidden=True,
            help="Resume WITHOUT the stored results (shows that the checks catch repeats).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Crash a tool-calling agent with SIGKILL mid-run, resume it, prove nothing ran twice.

    A deterministic research agent runs in a child process against a SQLite file; the
    child is SIGKILLed right after it commits seq --kill-after; this process reopens
    the store (timed), finishes the agent and checks the tools' own log.

    Exit code 0 when every check passes, 1 otherwise.
    """
    from .. import demo as demo_mod

    path = db or global_db(ctx) or demo_mod.DEFAULT_DB
    console = out_console()
    reporter = None if json_out else render.DemoReporter(console)
    try:
        result = demo_mod.run_demo(
            path,
            keep=keep,
            kill_after=kill_after,
            seed=seed,
            step_delay=step_delay,
            snapshot_every=snapshot_every,
            timeout=timeout,
            report=reporter,
            amnesia=simulate_amnesia,
        )
    except demo_mod.DemoFailed as exc:
        raise _demo_failed(str(exc)) from None
    finally:
        if reporter is not None:
            reporter.close()
    summary = result.summary()
    if json_out:
        render.print_json(summary)
    else:
        console.print()
        console.print(render.demo_timeline(summary, console.width))
        console.print(render.demo_position(summary))
        console.print(render.demo_tools(summary))
        console.print(render.demo_checks(summary))
        if summary["final"].get("answer"):
            console.print(f"\n[bold]answer:[/] {escape(summary['final']['answer'])}")
        verdict = (
            "[bold green]every tool call ran exactly once; the crash lost and repeated nothing[/]"
            if result.ok
            else "[bold red]CHECKS FAILED[/]"
        )
        console.print(verdict)
        print_command(console, "inspect it", "history", result.agent_id, "--db", result.db_path)
    if not result.ok:
        raise typer.Exit(1)


def _demo_failed(message: str) -> typer.Exit:
    return fail(f"demo failed: {message}", 1)
