"""Security commands: ``keys generate|status``, ``rekey``, ``witness export|check``.

Keys come from ``--key-file FILE``, else ``$STATEKEEPER_KEY_FILE``, else
``$STATEKEEPER_KEYS`` (see :mod:`statekeeper.codec.keys`); every command that opens
a store (these and ``show``, ``history``, ``verify``…) uses the environment's keyring.
Key material is never printed, except by ``keys generate`` when asked for a new key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import ConfigurationError, RewriteBelowPrunedBase
from . import render
from ._markup import escape
from .app import (
    DbOption,
    JsonOption,
    app,
    err_console,
    handled,
    out_console,
    resolve_url,
    run,
    sqlite_file,
    stop_signal,
)
from .files import check_output_file, json_tagged
from .stores import KeyFileOption, env_keyring, open_store

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["env_keyring", "keys_app", "witness_app"]


# ---------------------------------------------------------------------------- keys

keys_app = typer.Typer(
    name="keys",
    help="Create keys and see which keys the stored records use.",
    no_args_is_help=True,
)


@keys_app.command("generate")
@handled
def keys_generate(
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            metavar="FILE",
            help="Add the key to this key file (created mode 0600 if missing) instead of "
            "printing it.",
        ),
    ] = None,
    key_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Id of the new key [default: k<N+1>, kN the highest id of the file: "
            "an id once retired is never handed out again].",
        ),
    ] = None,
    activate: Annotated[
        bool,
        typer.Option(
            "--activate/--no-activate",
            help="Make the new key the active one (new records use it) [default: yes].",
        ),
    ] = True,
) -> None:
    """Create a new random AES-256 key (print it as id=base64, or add it to a key file)."""
    from ..codec.keys import add_key_to_file, generate_key

    if key_file is None:
        typer.echo(f"{key_id or 'k1'}={generate_key()}")
        return
    check_output_file(key_file, "key file", json_tagged("keys"))
    new_id, active = add_key_to_file(key_file, key_id=key_id, activate=activate)
    out_console().print(
        f"added key {escape(new_id)!r} to {escape(str(key_file))}"
        + (" (active)" if active == new_id else "")
    )


@keys_app.command("status")
@handled
def keys_status(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Count stored records and stream heads per key id (read from clear headers; the
    pre-migration records a migration keeps in head events count under their key). A
    key no record names any more can be removed from the keyring."""
    from ..security.keyusage import data_key_usage, idempotency_usage
    from ..security.rekey import key_usage

    url = resolve_url(ctx, db)
    keyring = env_keyring(key_file)

    async def go() -> tuple[dict[str, int], dict[str, int], str | None, dict[str, int]]:
        async with open_store(url, key_file=key_file) as store:
            usage = await key_usage(store)
            idem = await idempotency_usage(store)
            return usage, idem, _narrow_principal(store), await data_key_usage(store)

    counted, idem, narrow, wrapping = run(go())
    # natural order (k1, k2, ..., k10), never as text (k1, k10, k2)
    usage = {k: counted[k] for k in sorted(counted, key=key_id_order)}
    missing = [
        k for k in usage if keyring is not None and not k.startswith("(") and k not in keyring
    ]
    active = keyring.active_id if keyring is not None else None
    info = {
        "active": active,
        "keyring": sorted(keyring.ids, key=key_id_order) if keyring is not None else [],
        "usage": usage,
        "missing": missing,
        # idempotency records per key id: those under an old key (their events
        # compacted away, rekey's idempotency_records_left) need it, or a retry of
        # their append is stored again
        "idempotency_records": {k: idem[k] for k in sorted(idem, key=key_id_order)},
        # the store's data keys in the key vault per master key wrapping them (deleted
        # agents' too): a key still wrapping some is needed to open them
        "data_keys": {k: wrapping[k] for k in sorted(wrapping, key=key_id_order)},
        # False under --as without admin on '**': the agents it may read only
        "whole_store": narrow is None,
    }
    if json_out:
        render.print_json(info)
        return
    from rich.table import Table

    table = Table(title="Records and heads per key", title_justify="left")
    table.add_column("key id", style="bold", overflow="fold")
    table.add_column("records + heads", justify="right")
    table.add_column("")
    for key_id, n in usage.items():
        note = ""
        if key_id == active:
            note = "[green]active[/]"
        elif key_id in missing:
            note = "[red]not in the keyring[/]"
        elif key_id == "(none)":
            note = "[yellow]not encrypted[/]" if keyring is not None else "no key"
        elif key_id == "(forgotten)":
            note = "crypto-shredded: no key opens them"
        elif keyring is not None:
            note = "old key: run 'statekeeper rekey'"
        table.add_row(escape(key_id), f"{n:,}", note)
    out_console().print(table)
    for key_id in sorted(idem, key=key_id_order):
        if key_id != active and keyring is not None and not key_id.startswith("("):
            out_console().print(
                f"[yellow]{idem[key_id]:,} idempotency record(s) under key {escape(key_id)!r}"
                " (their events compacted away, so rekey cannot move them): removing the"
                " key makes a retry of their append be stored again[/]"
            )
    for key_id in sorted(wrapping, key=key_id_order):
        if key_id != active and keyring is not None:
            out_console().print(
                f"[yellow]{wrapping[key_id]:,} data key(s) in the key vault wrapped under key"
                f" {escape(key_id)!r} (deleted agents' too): run 'statekeeper rekey' before"
                " removing it[/]"
            )
    if narrow is not None:
        out_console().print(
            f"[yellow]counted only the agents principal {escape(narrow)!r} may read: records "
            "of other namespaces (and the audit log) are not counted; do not retire a key "
            "on this count (an admin on '**', or a run without --as, counts the store)[/]"
        )


def key_id_order(key_id: str) -> tuple[list[str | int], str]:
    """The sort key putting key ids in natural order: k2 before k10 (runs of ASCII
    digits compare as numbers; the id itself breaks ties such as k01 and k1)."""
    parts: list[str | int] = [
        int(part) if i % 2 else part for i, part in enumerate(re.split(r"([0-9]+)", key_id))
    ]
    return parts, key_id


def _narrow_principal(store: object) -> str | None:
    """The principal of a store opened with ``--as`` that is not an admin on every
    namespace (``**``): what it runs covers only its own part of the store. None for a
    store admin or a store opened without ``--as``."""
    from ..store.governed import governance_of

    governance = governance_of(store)
    if governance is None or governance.store_admin():
        return None
    return governance.principal or ""


vault_app = typer.Typer(
    name="vault",
    help="The key vault of per-agent data keys (crypto-shredding: 'statekeeper forget').",
    no_args_is_help=True,
)


@vault_app.command("init")
@handled
def keys_vault_init(
    key_file: Annotated[
        Path,
        typer.Argument(
            metavar="KEY_FILE",
            help="The key file (JSON) whose master keys wrap the data keys; it is "
            "updated to name the vault.",
        ),
    ],
    vault: Annotated[
        Path | None,
        typer.Option(
            "--vault",
            metavar="FILE",
            help="Where the vault goes (a SQLite file, created mode 0600) [default: "
            "KEY_FILE's name with .vault.db, next to it].",
        ),
    ] = None,
) -> None:
    """Set up a key vault for KEY_FILE: from then on every agent written with that key
    file gets a data key of its own, so 'statekeeper forget AGENT' can destroy it.

    Records written before stay under the master key (a forget cannot shred them); keep
    the vault with the key file, and back it up as a key, not as data."""
    from ..governance.shredding import init_vault

    made, path = init_vault(key_file, vault)
    where = escape(str(path))
    if made:
        out_console().print(f"key vault {where} set up for {escape(str(key_file))}")
    else:
        out_console().print(f"{escape(str(key_file))} already uses the key vault {where}")


keys_app.add_typer(vault_app)
app.add_typer(keys_app)


# --------------------------------------------------------------------------- rekey


@app.command()
@handled
def rekey(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    progress_file: Annotated[
        Path | None,
        typer.Option(
            "--progress-file",
            metavar="FILE",
            help="Where progress is recorded, so an interrupted run resumes "
            "[default: <db>.rekey.json for SQLite, else none].",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Records per rewrite.")] = 500,
    json_out: JsonOption = False,
) -> None:
    """Re-encrypt every stored record under the active key (online; resumable).

    Records already under the active key are skipped; records stored in the clear are
    encrypted (converting a store to encryption). Interrupt at any time and run it
    again to resume.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ..security.rekey import RekeyProgress, RekeyStats
    from ..security.rekey import rekey as do_rekey
    from ..security.rekey_retry import gave_up_pruned

    url = resolve_url(ctx, db)
    path = sqlite_file(url)
    if progress_file is None and path is not None:
        progress_file = path.with_name(path.name + ".rekey.json")
    if progress_file is not None:
        check_output_file(progress_file, "rekey progress file", json_tagged("statekeeper_rekey"))

    async def go() -> tuple[RekeyStats, str, str | None, str | None, RekeyStats | None]:
        async with open_store(url, key_file=key_file, readonly=False, need_key=True) as store:
            assert store.codec.keyring is not None
            active = store.codec.keyring.active_id
            resumed = before = None  # (before: what the runs before the resume did)
            if progress_file is not None:
                earlier = RekeyProgress.load(progress_file)
                if earlier is not None and earlier.target_key == active and not earlier.done:
                    resumed, before = earlier.after, earlier.stats
            total_agents = await store.count_agents()
            progress = Progress(
                TextColumn(f"[bold]re-encrypting under {escape(active)!r}[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("agents"),
                TextColumn("{task.fields[records]:,} records", style="cyan"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[agent]}", style="dim"),
                console=err_console(),
                transient=False,
                disable=json_out or not err_console().is_terminal,
            )
            done = 0
            if resumed is not None:
                done = len([i async for i in store.iter_agents() if i.agent_id <= resumed])
            with progress:
                task = progress.add_task(
                    "rekey", total=total_agents, completed=done, agent="", records=0
                )

                def on_agent(agent_id: str, _one: RekeyStats, total: RekeyStats) -> None:
                    finished[0] += 1
                    finished[1] = agent_id
                    progress.update(
                        task,
                        advance=1,
                        agent=agent_id,
                        records=total.events + total.snapshots,
                    )

                stats = await do_rekey(
                    store, progress_file=progress_file, on_agent=on_agent, batch=batch
                )
            return stats, active, resumed, _narrow_principal(store), before

    finished: list[Any] = [0, None]  # agents finished by this run, the last one
    try:
        stats, active, resumed, narrow, before = run(go())
    except (KeyboardInterrupt, SystemExit) as exc:
        if stop_signal(exc) is not None:
            _rekey_stopped(finished[0], finished[1], progress_file)
        raise
    except RewriteBelowPrunedBase as exc:
        if exc.walks is None:
            raise
        raise ConfigurationError(gave_up_pruned(exc)) from None  # (exit 2, as it was)
    summary: dict[str, Any] = {
        "active_key": active,
        "resumed_after": resumed,
        "agents": stats.agents,
        "events_reencrypted": stats.events,
        "snapshots_reencrypted": stats.snapshots,
        "heads_reauthenticated": stats.heads,
        "already_done": stats.skipped,
        "retries": stats.retries,
        "idempotency_records_rekeyed": stats.keys,
        # under an older key, their events compacted away: a retry is stored again once
        # that key is removed (docs/security.md)
        "idempotency_records_left": stats.keys_left,
        # data keys of agents not walked (deleted, pruned generations) wrapped again
        "data_keys_rewrapped": stats.data_keys,
        # False under --as without admin on '**': the agents it administers only
        "whole_store": narrow is None,
    }
    whole = RekeyStats()  # a resumed run: the whole operation's (this run's: the keys above)
    for part in (before, stats) if resumed and before is not None else ():
        whole.add(part)
    if resumed and before is not None:
        summary["whole_run"] = {
            "agents": whole.agents, "events_reencrypted": whole.events,
            "snapshots_reencrypted": whole.snapshots, "already_done": whole.skipped,
        }  # fmt: skip
    if json_out:
        render.print_json(summary)
        return
    n = whole if resumed and before is not None else stats
    out_console().print(
        f"[green]✓[/] {n.agents:,} agent(s): {n.events:,} event(s) and "
        f"{n.snapshots:,} snapshot(s) re-encrypted under {escape(active)!r}, "
        f"{n.skipped:,} already were"
        + (
            f" (resumed after {escape(resumed)!r}: {stats.agents:,} agent(s) in this run,"
            f" {before.agents:,} before)"
            if resumed and before is not None
            else f" (resumed after {escape(resumed)!r})"
            if resumed
            else ""
        )
    )
    if stats.keys_left:
        out_console().print(
            f"[yellow]{stats.keys_left:,} idempotency record(s) stay under an older key"
            " (their events were compacted away): a retry of their appends is stored"
            " again once that key is removed[/]"
        )
    if narrow is not None:
        out_console().print(
            f"[yellow]only the agents principal {escape(narrow)!r} may see were re-encrypted: "
            "other namespaces (and the audit log) may still be under older keys; run it "
            "as an admin on '**' (or without --as) before retiring a key[/]"
        )


def _rekey_stopped(done: int, last: str | None, progress_file: Path | None) -> None:
    """How far a rekey stopped by Ctrl-C or SIGTERM got, and how to finish it (on
    stderr, before the usual one line): the old keys are still needed until then."""
    got = f"after {done:,} agent(s) (the last: {escape(last)!r})" if last else "before any agent"
    if progress_file is not None:
        resume = (
            f"its progress is kept in {escape(str(progress_file))}: run the same command "
            "again to resume"
        )
    else:
        resume = (
            "no progress file was kept (--progress-file FILE): run it again; records "
            "already under the active key are skipped"
        )
    err_console().print(
        f"[yellow]rekey stopped {got}; {resume}. Keep the old keys until it completes.[/]"
    )


# ------------------------------------------------------------------------- witness

witness_app = typer.Typer(
    name="witness",
    help="Export stream digests to a file kept outside the store; check them later "
    "(detects a rollback of the whole store).",
    no_args_is_help=True,
)


def _bar(label: str, total: int, disable: bool) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
        disable=disable or not err_console().is_terminal,
    )


@witness_app.command("export")
@handled
def witness_export(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Witness file to write.", show_default=False)],
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Write the verified head digest of every stream to FILE."""
    from ..security.witness import export_witness

    url = resolve_url(ctx, db)
    check_output_file(file, "witness file", json_tagged("statekeeper_witness"))

    async def go() -> dict[str, Any]:
        async with open_store(url, key_file=key_file) as store:
            total = await store.count_agents()
            with _bar("witnessing", total, json_out) as bar:
                task = bar.add_task("w", total=total)
                return await export_witness(store, file, on_agent=lambda _a: bar.advance(task))

    doc = run(go())
    forgotten = doc.get("forgotten", [])
    if json_out:
        render.print_json(
            {
                "file": str(file),
                "agents": doc["agents"],
                "store_digest": doc["store_digest"],
                "forgotten": forgotten,
            }
        )
        return
    out_console().print(
        f"[green]✓[/] witnessed {doc['agents']:,} stream(s) in {escape(str(file))}\n"
        f"  store digest {doc['store_digest']}"
    )
    if forgotten:
        out_console().print(
            f"left out {len(forgotten)} forgotten agent(s) (their data keys are destroyed): "
            + escape(", ".join(forgotten))
        )


@witness_app.command("check")
@handled
def witness_check(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Witness file to check.", show_default=False)],
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Check that every stream still holds what FILE witnessed. Exit code 1 when not."""
    from ..security.witness import WitnessReport, check_witness, load_witness

    url = resolve_url(ctx, db)
    doc = load_witness(file)

    async def go() -> WitnessReport:
        async with open_store(url, key_file=key_file) as store:
            with _bar("checking", len(doc["streams"]), json_out) as bar:
                task = bar.add_task("c", total=len(doc["streams"]))
                return await check_witness(store, doc, on_agent=lambda _a: bar.advance(task))

    report = run(go())
    if json_out:
        render.print_json(
            {
                "ok": report.ok,
                "checked": report.checked,
                "grown": report.grown,
                "new_agents": report.new_agents,
                "out_of_scope": report.out_of_scope,
                "problems": render.problems_json(report.problems),
            }
        )
    else:
        from ..store.store import Problem

        console = out_console()
        summary = (
            f"{report.checked:,} stream(s) checked against {escape(str(file))} "
            f"({doc.get('exported_at', '?')}); {report.grown:,} grew since, "
            f"{report.new_agents:,} new"
        )
        if report.out_of_scope:
            summary += f"; {report.out_of_scope:,} out of scope (not checked)"
        if report.ok:
            console.print(f"[green]✓ OK[/] — {summary}")
        else:
            console.print(
                render.problems_table(Problem(p.agent_id, p.seq, p.reason) for p in report.problems)
            )
            console.print(f"[bold red]✗ {len(report.problems)} problem(s)[/] — {summary}")
    if not report.ok:
        raise typer.Exit(1)


app.add_typer(witness_app)
