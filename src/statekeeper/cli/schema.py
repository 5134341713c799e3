"""Schema commands: ``migrate`` (dry run, run, resume, rollback, finalize) and
``schema show|status``.

The application's models and casters are Python code: ``--app MODULE[:ATTR]``
imports them (the current directory is on the import path). ``ATTR`` names a
:class:`~statekeeper.schema.SchemaRegistry`; without it the module's ``registry`` or
``schemas`` attribute, else the default registry the module registered into.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import ConfigurationError
from . import render
from ._markup import escape
from .app import DbOption, JsonOption, app, handled, out_console, resolve_url, run
from .stores import KeyFileOption, check_store, env_keyring

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..schema.migrate import MigrationReport
    from ..schema.registry import ModelSchema, SchemaRegistry
    from ..store import StateStore

__all__ = ["schema_app"]

AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        metavar="MODULE[:ATTR]",
        help="The module that registers the application's models and casters.",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="The stored model name [default: the registry's only model].",
        show_default=False,
    ),
]


def load_registry(spec: str) -> SchemaRegistry:
    """The registry ``--app MODULE[:ATTR]`` names."""
    from ..schema.registry import SchemaRegistry, registry

    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--app: cannot import {module_name!r}: {exc}") from None
    names = [attr] if attr else ["registry", "schemas"]
    for name in names:
        found = getattr(module, name, None)
        if isinstance(found, SchemaRegistry):
            return found
        if attr:
            raise ConfigurationError(f"--app: {spec} is not a SchemaRegistry")
    return registry


def pick(registry: SchemaRegistry, name: str | None) -> ModelSchema[Any]:
    """The schema ``--model`` names (or the registry's only user model)."""
    if name is not None:
        found = registry.find(name)
        if found is None:
            known = ", ".join(sorted(s.name for s in registry)) or "none"
            raise ConfigurationError(f"--model: no model {name!r} is registered (known: {known})")
        return found
    mine = [s for s in registry if not s.name.startswith("statekeeper.")]
    if len(mine) != 1:
        known = ", ".join(sorted(s.name for s in mine)) or "none"
        raise ConfigurationError(f"--model is needed: the application registers {known}")
    return mine[0]


@asynccontextmanager
async def _opened(url: str, key_file: Path | None, *, write: bool) -> AsyncIterator[StateStore]:
    """The store (never created): read-only for a dry run or a status, so a role that
    may only SELECT can run them; writable, committing concurrent writes together,
    for a migration."""
    from ..backends.url import open_backend
    from ..store import StateStore
    from .stores import open_store

    if not write:
        async with open_store(url, key_file=key_file, readonly=True) as store:
            yield store
        return
    from .stores import governance_options, namespace_options

    keyring = env_keyring(key_file)
    # --as: checked (admin on the namespace, ** without one) and audited; --namespace:
    # the agents of that namespace only, as through the API
    governance = governance_options(keyring)
    governance.update(namespace_options())
    backend = await check_store(url)
    await backend.close()
    store = StateStore(open_backend(url), keyring=keyring, durability="group", **governance)
    try:
        yield store
    finally:
        await store.close()


def _print_report(report: MigrationReport, json_out: bool) -> None:
    if json_out:
        render.print_json(report.to_dict())
        return
    console = out_console()
    verb = {
        "migrate": "would migrate" if report.dry_run else "migrated",
        "rollback": "rolled back",
        "finalize": "migrated",
        "verify": "checked",
    }[report.action]
    head = f"{report.action} {escape(report.model)}"
    if report.action != "rollback":
        head += f" to version {report.target}"
    if report.run_id:
        head += f" (run {report.run_id})"
    if report.dry_run:
        head += " \\[dry run: nothing written]"
    console.print(f"[bold]{head}[/]")
    if report.resumed_after is not None:
        console.print(f"resumed after agent {escape(repr(report.resumed_after))}")
    if report.action == "rollback" and report.target is None and not report.failed:
        console.print(
            "nothing to roll back: no agent holds a migration by this run that is not "
            "rolled back already (it migrated none, or they were restored)"
        )
    versions = ", ".join(f"v{k}: {v:,}" for k, v in sorted(report.versions.items()))
    console.print(f"agents scanned: {report.scanned:,}" + (f" ({versions})" if versions else ""))
    console.print(f"{verb}: {report.changed:,}   unchanged: {report.unchanged:,}   "
                  f"other models: {report.other:,}   retries: {report.retries:,}")  # fmt: skip
    rate = report.scanned / report.elapsed if report.elapsed > 0 else 0.0
    console.print(f"elapsed: {report.elapsed:.2f} s ({rate:,.0f} agents/s)")
    if report.removed:
        gone = ", ".join(f"{escape(k)} ({n:,})" for k, n in sorted(report.removed.items()))
        how = "would remove" if report.dry_run else "removed"
        console.print(f"[yellow]fields the casters {how} (agents):[/] {gone}")
    for version, sample in sorted(report.samples.items()):
        console.print(
            f"[bold]sample from version {version}[/]: agent {escape(repr(sample['agent_id']))}"
        )
        for op in sample["ops"]:
            console.print("  " + escape(_op(op)))
    if report.forced:
        console.print(
            f"[yellow]{report.forced:,} agent(s) written since the migration were restored "
            "by --force: the writes made since were thrown away (kept in history only)[/]"
        )
    if report.failed:
        console.print(f"[red]{len(report.failed):,} agent(s) cannot be written:[/]")
        for f in report.failed[:20]:
            console.print(f"  {escape(repr(f.agent_id))}: {escape(f.kind)}: {escape(f.error)}")
        if len(report.failed) > 20:
            console.print(f"  … and {len(report.failed) - 20:,} more (--json lists them all)")
    if report.verified or report.problems:
        state = (
            "[green]ok[/]" if not report.problems else f"[red]{len(report.problems)} problem(s)[/]"
        )
        console.print(f"verified from storage: {report.verified:,} agent(s), {state}")
        for p in report.problems[:20]:
            console.print(f"  {escape(repr(p.agent_id))}: {escape(p.error)}")


def _op(op: dict[str, Any]) -> str:
    import json

    value = ""
    if "value" in op:
        text = json.dumps(render.shown(op["value"]), ensure_ascii=False)
        value = " " + (text if len(text) <= 60 else text[:57] + "...")
    return f"{op.get('op')} {op.get('path')}{value}"


@app.command()
@handled
def migrate(
    ctx: typer.Context,
    app_spec: AppOption,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    model: ModelOption = None,
    to: Annotated[
        int | None,
        typer.Option(
            "--to", metavar="VERSION", min=1, help="Target schema version [default: the model's]."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Report counts, sample diffs and failures; write nothing."),
    ] = False,
    do_rollback: Annotated[
        bool, typer.Option("--rollback", help="Restore the pre-migration states of the run.")
    ] = False,
    do_finalize: Annotated[
        bool,
        typer.Option("--finalize", help="Migrate stragglers, verify, close the rollback window."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="--rollback: also restore agents written since their migration and "
            "without a downcaster, THROWING AWAY the writes made since (they stay in "
            "the history only).",
        ),
    ] = False,
    run_id: Annotated[
        str | None,
        typer.Option("--run", metavar="ID", help="--rollback: the run [default: the journal's]."),
    ] = None,
    journal: Annotated[
        Path | None,
        typer.Option(
            "--journal",
            metavar="FILE",
            help="The run's journal (resume, rollback, finalize) "
            "[default: statekeeper-migrate-<model>.json].",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Agents written at a time (one commit).")
    ] = 64,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="Skip re-reading every agent afterwards.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Rewrite stored states to a model's schema version, in batches, while the store
    stays in use. Each agent's migration is one atomic event: interrupt at any time and
    run it again to resume. The pre-migration records stay in the stream until
    --finalize; --rollback restores them.

    Exit code 1 when an agent cannot be migrated or fails verification.
    """
    from ..schema import migrate as mig
    from .progress import bar

    if do_rollback + do_finalize + dry_run > 1:
        raise ConfigurationError("give at most one of --dry-run, --rollback, --finalize")
    registry = load_registry(app_spec)
    schema = pick(registry, model)
    url = resolve_url(ctx, db)
    if journal is None:  # (one per namespace: a run in one never resumes another's)
        from .namespacing import current_namespace

        name = schema.name + (f"-{current_namespace()}" if current_namespace() else "")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        journal = Path(f"statekeeper-migrate-{safe}.json")

    label = "rollback" if do_rollback else "dry run" if dry_run else "migrate"
    #: agents processed so far, of how many (what an interrupted run says)
    seen = [0, 0]

    async def go() -> MigrationReport:
        async with _opened(url, key_file, write=not dry_run) as store:
            with bar(f"{label} {schema.name}", disable=json_out) as progress:
                task = progress.add_task(label, total=None)

                def on_progress(done: int, total: int) -> None:
                    if hasattr(progress, "update"):
                        progress.update(task, total=total)
                    progress.advance(task, done - seen[0])
                    seen[0], seen[1] = done, total

                if do_rollback:
                    return await mig.rollback(
                        store, schema, run_id=run_id, journal=journal,
                        force=force, on_progress=on_progress,
                    )  # fmt: skip
                if do_finalize:
                    return await mig.finalize(store, schema, journal=journal)
                return await mig.migrate(
                    store, schema, to=to, dry_run=dry_run, journal=journal,
                    concurrency=concurrency, check=not no_verify, on_progress=on_progress,
                )  # fmt: skip

    try:
        report = run(go())
    except KeyboardInterrupt:
        _interrupted(label, seen[0], seen[1], journal)
        raise
    _print_report(report, json_out)
    if not report.ok:
        raise typer.Exit(1)


def _interrupted(label: str, done: int, total: int, journal: Path) -> None:
    """What an interrupted run got through, and how to go on (on stderr, before the
    usual "interrupted" line)."""
    from .app import err_console

    where = f"{done:,} of {total:,} agents processed" if total else "before the first page"
    if label == "dry run":
        then = "nothing was written"
    elif label == "rollback":
        then = (
            "every agent is either rolled back or not: run the same command again to "
            "finish (agents already restored are skipped)"
        )
    else:
        then = (
            "every agent is either migrated or not: run the same command again to resume "
            f"after the last finished page ({escape(str(journal))} records it)"
        )
    err_console().print(f"{label} interrupted, {where}; {then}", soft_wrap=True)


schema_app = typer.Typer(
    name="schema", help="State models: versions, casters, stored versions.", no_args_is_help=True
)


@schema_app.command("show")
@handled
def schema_show(app_spec: AppOption, json_out: JsonOption = False) -> None:
    """List the registered models: name, version, upcasters, downcasters, renames."""
    registry = load_registry(app_spec)
    rows = [
        {
            "model": s.name,
            "class": f"{s.model.__module__}.{s.model.__qualname__}",
            "kind": s.adapter.kind,
            "version": s.version,
            "aliases": sorted(s.aliases),
            "upcasters": [f"{v}->{v + 1}" for v in sorted(s.upcasters)],
            "downcasters": [f"{v}->{v - 1}" for v in sorted(s.downcasters)],
            "state_renames": {str(k): v for k, v in sorted(s.state_renames.items())},
            "event_renames": {str(k): v for k, v in sorted(s.event_renames.items())},
            "event_upcasters": sorted(f"{t}@{v}" for t, v in s.event_upcasters),
        }
        for s in sorted(registry, key=lambda s: s.name)
    ]
    if json_out:
        render.print_json(rows)
        return
    from rich.table import Table

    table = Table(title="Registered state models", title_justify="left")
    for column in ("model", "kind", "version", "upcasters", "downcasters"):
        table.add_column(column)
    for s in sorted(registry, key=lambda s: s.name):
        table.add_row(
            escape(s.name),
            s.adapter.kind,
            str(s.version),
            ", ".join(f"{v}->{v + 1}" for v in sorted(s.upcasters)) or "-",
            ", ".join(f"{v}->{v - 1}" for v in sorted(s.downcasters)) or "-",
        )
    out_console().print(table)


@schema_app.command("status")
@handled
def schema_status(
    ctx: typer.Context,
    app_spec: AppOption,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    model: ModelOption = None,
    json_out: JsonOption = False,
) -> None:
    """Count the stored agents of a model by schema version, and those that would not
    load (``--json``: the report of a ``migrate --dry-run``)."""
    from ..schema import migrate as mig

    registry = load_registry(app_spec)
    schema = pick(registry, model)
    url = resolve_url(ctx, db)

    async def go() -> MigrationReport:
        async with _opened(url, key_file, write=False) as store:
            return await mig.migrate(store, schema, dry_run=True)

    report = run(go())
    if json_out:
        render.print_json(report.to_dict())
        return
    _print_status(report)


def _print_status(report: MigrationReport) -> None:
    """``schema status``: the stored agents of the model per version, and those that
    would not load at the current one (nothing of a migration: no diff, no rate)."""
    console = out_console()
    agents = sum(report.versions.values())
    console.print(
        f"[bold]{escape(report.model)}: {agents:,} stored agent(s) by schema version"
        f" (current: {report.target})[/]"
    )
    current = report.target if report.target is not None else 0
    for version, count in sorted(report.versions.items()):
        note = ""
        if version < current:
            note = "  older: `statekeeper migrate` rewrites them"
        elif version > current:
            note = "  newer than this code"
        console.print(f"  v{version}  {count:,}{escape(note)}", soft_wrap=True)
    if report.other:
        console.print(f"{report.other:,} agent(s) of other models")
    if report.failed:
        console.print(
            f"[red]{len(report.failed):,} agent(s) would not load at version {report.target}:[/]"
        )
        for f in report.failed[:20]:
            console.print(f"  {escape(repr(f.agent_id))}: {escape(f.kind)}: {escape(f.error)}")
        if len(report.failed) > 20:
            console.print(f"  … and {len(report.failed) - 20:,} more (--json lists them all)")


app.add_typer(schema_app)
