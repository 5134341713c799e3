"""``statekeeper langgraph …``: maintenance of LangGraph threads kept by
:class:`~statekeeper.integrations.langgraph.StatekeeperSaver`.

``statekeeper langgraph prune --keep-last 20 --ttl 30d [--thread ID …] [--dry-run]``
applies retention (see :meth:`StatekeeperSaver.prune_retention`);
``statekeeper langgraph import SOURCE_URL TARGET_URL`` copies the threads of a LangGraph
``SqliteSaver`` / ``PostgresSaver`` database into a statekeeper store and ``export``
copies them back (see :mod:`statekeeper.integrations.langgraph.migrate`). LangGraph is imported
only when a command runs, so the rest of the CLI works without the extra.

Under ``--as`` each needs ``admin`` on ``**``: the commands work through a saver of
their own over the whole store (every thread, whichever namespace its prefix puts it
in), as ``migrate`` does; a refusal exits 4 before anything is read or written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from .._durations import DURATION_EXAMPLES, seconds_in
from .app import DbOption, JsonOption, fail, handled, out_console, resolve_url, run
from .stores import (
    KeyFileOption,
    check_store,
    env_keyring,
    governance_options,
    refuse_in_memory,
    require_store_admin,
)

__all__ = ["langgraph_app", "parse_duration"]

langgraph_app = typer.Typer(
    name="langgraph",
    help="Maintain LangGraph threads stored by the statekeeper checkpointer; move "
    "them in from (and out to) LangGraph's SqliteSaver / PostgresSaver.",
    no_args_is_help=True,
    add_completion=False,
)


def parse_duration(text: str, option: str | None = None) -> float:
    """Seconds in ``"90"``, ``"90s"``, ``"15m"``, ``"1h30m"``, ``"30d"`` or ``"2w"``;
    ``option`` (the flag it was given to) named in the usage error."""
    seconds = seconds_in(text)
    if seconds is None:
        raise typer.BadParameter(
            f"{text!r} is not a positive duration like {DURATION_EXAMPLES}",
            param_hint=f"'{option}'" if option is not None else None,
        )
    return seconds


@langgraph_app.command("prune")
@handled
def prune(
    ctx: typer.Context,
    keep_last: Annotated[
        int | None,
        typer.Option("--keep-last", min=1, help="Keep the N newest checkpoints of each namespace."),
    ] = None,
    ttl: Annotated[
        str | None,
        typer.Option(
            "--ttl",
            help="Remove checkpoints older than this (90s, 15m, 12h, 30d, 2w); a thread whose "
            "newest checkpoint is older is deleted.",
        ),
    ] = None,
    thread: Annotated[
        list[str] | None,
        typer.Option(
            "--thread", "-t", help="Only this thread (repeatable). Default: every thread."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would go; change nothing.")
    ] = False,
    prefix: Annotated[
        str, typer.Option("--prefix", help="Agent-id prefix of the saver's streams.")
    ] = "lg/",
    db: DbOption = None,
    key_file: KeyFileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Apply keep-last-N and/or TTL retention to LangGraph threads."""
    if keep_last is None and ttl is None:
        raise fail("give --keep-last and/or --ttl", 2)
    seconds = parse_duration(ttl, "--ttl") if ttl is not None else None
    url = resolve_url(ctx, db)
    keyring = env_keyring(key_file)
    try:
        from ..integrations.langgraph import StatekeeperSaver, ThreadNotFound
    except ImportError as exc:
        raise fail(str(exc), 2) from None

    async def exists() -> None:  # never create a store to prune it
        await (await check_store(url)).close()

    run(exists())
    run(require_store_admin(url, key_file, "langgraph prune"))
    # under --as, the saver's store is the principal's: the prune's mutations (a new
    # generation of each thread, the old one deleted) are checked and audited
    governed = governance_options(keyring)
    with StatekeeperSaver.from_url(url, prefix=prefix, keyring=keyring, **governed) as saver:
        for thread_id in thread or ():  # a mistyped id is named, not "0 thread(s) scanned"
            if (
                next(iter(saver.list({"configurable": {"thread_id": thread_id}}, limit=1)), None)
                is None
            ):
                raise ThreadNotFound(thread_id, prefix)
        report = saver.prune_retention(
            thread or None, keep_last=keep_last, ttl=seconds, dry_run=dry_run
        )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "dry_run": report.dry_run,
                    "threads_scanned": report.threads_scanned,
                    "threads_compacted": report.threads_compacted,
                    "threads_deleted": report.threads_deleted,
                    "checkpoints_deleted": report.checkpoints_deleted,
                    "writes_deleted": report.writes_deleted,
                    "threads_skipped": report.threads_skipped,
                }
            )
        )
        return
    verb = "would remove" if dry_run else "removed"
    out_console().print(
        f"{report.threads_scanned} thread(s) scanned: {verb} {report.checkpoints_deleted} "
        f"checkpoint(s) and {report.writes_deleted} write(s); {report.threads_compacted} "
        f"thread(s) compacted, {report.threads_deleted} deleted"
        + (
            f"; skipped (busy): {', '.join(report.threads_skipped)}"
            if report.threads_skipped
            else ""
        )
    )


def _move(
    direction: str,
    source: str,
    target: str,
    *,
    thread: list[str] | None,
    dry_run: bool,
    key_file: Path | None,
    as_json: bool,
) -> None:
    """``langgraph import`` / ``langgraph export``: copy, verify, report."""
    import signal

    from ..backends.redact import scrub
    from . import exits
    from .app import masked
    from .progress import bar
    from .safe_stop import check, stopped_at_safe_points

    def hide(text: str) -> str:
        return scrub(scrub(masked(text), source), target)

    try:
        keyring = env_keyring(key_file)
        try:
            from ..integrations.langgraph import migrate
        except ImportError as exc:
            raise fail(str(exc), 2) from None
        move = (
            # under --as, the import's writes are checked and audited as the principal's
            partial(migrate.import_threads, store_options=governance_options(keyring))
            if direction == "import"
            else migrate.export_threads
        )
        # the statekeeper side: the target of an import, the source of an export
        store_url = target if direction == "import" else source
        if direction == "import":
            refuse_in_memory(target, "langgraph import")
        run(require_store_admin(store_url, key_file, f"langgraph {direction}"))
        # Ctrl-C / SIGTERM stop the copy between two saver calls, never inside the
        # saver's event loop (see .safe_stop): one line, exit 130 / 143, resumable
        with (
            stopped_at_safe_points(),
            bar(f"{direction}ing", unit="checkpoints", disable=as_json or dry_run) as shown,
        ):

            def progress(total: int) -> Callable[[int], None]:
                task = shown.add_task(f"{direction}ing", total=total)

                def advance(n: int) -> None:
                    shown.advance(task, n)
                    check()  # a safe point, once per checkpoint

                return advance

            report = move(
                source,
                target,
                keyring=keyring,
                thread_ids=thread or None,
                dry_run=dry_run,
                progress=progress,
            )
    except (typer.Exit, typer.Abort):
        raise
    except (Exception, KeyboardInterrupt) as exc:  # Ctrl-C: "error: interrupted", 130
        raise typer.Exit(exits.report(exc, hide)) from None
    except SystemExit as exc:  # SIGTERM (app._terminated_as_exit): as Ctrl-C, 143
        if exc.code != 128 + signal.SIGTERM:
            raise
        exits.print_error("terminated (run it again to resume the copy)")
        raise typer.Exit(128 + signal.SIGTERM) from None
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
        return
    console = out_console()
    if dry_run:
        console.print(
            f"would copy {report.checkpoints - report.checkpoints_present} of "
            f"{report.checkpoints} checkpoint(s) in {report.threads} thread(s) "
            f"({report.namespaces} namespace(s), {report.writes} pending write(s)); "
            f"{report.checkpoints_present} already in the target; nothing written"
        )
        return
    console.print(
        f"copied {report.checkpoints_copied} checkpoint(s) and {report.writes_copied} "
        f"pending write(s) in {report.threads} thread(s) ({report.namespaces} namespace(s))"
        + (
            f"; {report.checkpoints_present} checkpoint(s) were already there"
            if report.checkpoints_present
            else ""
        )
    )
    console.print(
        f"verified: {report.threads_verified} thread(s) read back through the new saver "
        "equal the source (checkpoints, parents, values, metadata, pending writes)"
    )


_SourceArg = Annotated[str, typer.Argument(metavar="SOURCE_URL", show_default=False)]
_TargetArg = Annotated[str, typer.Argument(metavar="TARGET_URL", show_default=False)]
_ThreadOption = Annotated[
    list[str] | None,
    typer.Option("--thread", "-t", help="Only this thread (repeatable). Default: every thread."),
]
_DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Count what would be copied; write nothing.")
]


@langgraph_app.command("import")
def import_cmd(
    source: _SourceArg,
    target: _TargetArg,
    thread: _ThreadOption = None,
    dry_run: _DryRunOption = False,
    key_file: KeyFileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy every thread of a LangGraph SqliteSaver / PostgresSaver database (a SQLite
    file or postgresql:// URL) into a statekeeper store, then verify it. Resumable:
    run it again after an interruption. The source is only read."""
    _move(
        "import",
        source,
        target,
        thread=thread,
        dry_run=dry_run,
        key_file=key_file,
        as_json=as_json,
    )


@langgraph_app.command("export")
def export_cmd(
    source: _SourceArg,
    target: _TargetArg,
    thread: _ThreadOption = None,
    dry_run: _DryRunOption = False,
    key_file: KeyFileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy every LangGraph thread of a statekeeper store into a SqliteSaver /
    PostgresSaver database (created when missing), then verify it. Resumable; the
    source is only read."""
    _move(
        "export",
        source,
        target,
        thread=thread,
        dry_run=dry_run,
        key_file=key_file,
        as_json=as_json,
    )
