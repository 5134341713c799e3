"""``statekeeper projections status|rebuild|run``: the read models kept from the feed.

The read models live in a SQLite file of their own (``--read-model``; next to a
SQLite store by default: ``agents.db`` -> ``agents.projections.db``). The store is
opened read-only: projections never write to it.

Under ``--as`` they need ``admin`` on ``**``: a read model follows the whole store's
change feed (its rows and positions count every tenant's events), and one built by a
principal that reads only some agents would be a silently partial read model in the
file every reader of the store shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigurationError, NotOwned
from ._markup import escape
from .app import DbOption, JsonOption, app, handled, out_console, resolve_url, run, sqlite_file
from .stores import KeyFileOption, open_store

if TYPE_CHECKING:
    from ..backends.sqlite.files import SqliteFile
    from ..feed.runner import ProjectionStatus
    from ..store import StateStore

__all__ = ["projections_app"]

projections_app = typer.Typer(
    name="projections",
    help="Read models kept from the change feed: status, rebuild, run.",
    no_args_is_help=True,
)

ReadModelOption = Annotated[
    Path | None,
    typer.Option(
        "--read-model",
        metavar="FILE",
        help="The SQLite file of the read models [default: next to a SQLite store, "
        "<store>.projections.db; required for other stores].",
        show_default=False,
    ),
]


async def _store_admin(store: StateStore) -> None:
    """Under ``--as``: AccessDenied (audited) unless the principal is admin on ``**``."""
    from ..governance.hooks import require_namespace

    await require_namespace(store, "admin", "projections")


def read_model_path(url: str, given: Path | None) -> Path:
    """``--read-model``, else the file next to a SQLite store; :class:`NotOwned` when
    it holds something else than read models (nothing is written to it)."""
    path = given
    if path is None:
        store_file = sqlite_file(url)
        if store_file is None:
            raise ConfigurationError(
                "--read-model FILE is needed: the store is not a SQLite file to put it next to"
            )
        path = store_file.with_name(store_file.stem + ".projections.db")
    _require_read_models(path)
    return path


async def _read_models_of(store: StateStore, url: str, given: Path | None) -> Path:
    """:func:`read_model_path`; the default one (``x.projections.db``, shared by every
    store named ``x.<something>`` in the folder: ``x.db``, ``x.db2``, ``x.sqlite``) is
    refused when it holds another store's projections
    (:class:`~statekeeper.errors.ReadModelOfAnotherStore`): its status was shown as this
    store's, its rebuild emptied the other store's read model."""
    from ..feed.feedcheck import check_file, store_mark

    path = read_model_path(url, given)
    if given is None:
        check_file(str(path), await store.backend.feed_id(), store_mark(store.backend))
    return path


def looked_at(path: Path) -> tuple[bool, SqliteFile]:
    """Whether ``path`` is a read-model file (a SQLite file with an ``sk_projections``
    table), and what :func:`~statekeeper.backends.sqlite.files.inspect_sqlite_file`
    found there; :class:`ConfigurationError` when it cannot be read."""
    from ..backends.sqlite.files import connect_read_only, inspect_sqlite_file

    try:
        info = inspect_sqlite_file(path)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    if info.kind != "foreign":
        return False, info
    conn = connect_read_only(path, timeout=5.0)
    try:
        tracking = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sk_projections'"
        ).fetchone()
    finally:
        conn.close()
    return tracking is not None, info


def _require_read_models(path: Path) -> None:
    """A read-model file is created, or reopened when it holds ``sk_projections``;
    anything else (the store itself, another application's database, a text file) is
    refused untouched: opening it would add tables and switch it to WAL."""
    from ..backends.sqlite.files import describe

    model, info = looked_at(path)
    if model or info.kind == "missing":
        return
    raise NotOwned(
        f"refusing to write read models into {path}: it {describe(info)}, not a read-model"
        " file statekeeper wrote; choose another --read-model"
    )


def _status_rows(rows: list[ProjectionStatus], json_out: bool) -> None:
    if json_out:
        from . import render

        render.print_json(
            [
                {
                    "name": s.name,
                    "state": s.state,
                    "position": s.position,
                    "head": s.head,
                    "behind": s.behind,
                    "applied": s.applied,
                    "error": s.error,
                    "error_position": s.error_position,
                    "updated_at": render.iso(s.updated_at),
                }
                for s in rows
            ]
        )
        return
    from rich.table import Table

    table = Table(title="Projections", title_justify="left")
    for column in ("projection", "state", "position", "behind", "applied", "error"):
        table.add_column(
            column, justify="right" if column in ("position", "behind", "applied") else "left"
        )
    for s in rows:
        state = {
            "failed": "[red]failed[/]",
            "rebuilding": "[yellow]rebuilding[/]",
            "seeding": "[yellow]seeding[/]",
            "new": "[dim]never run[/]",
        }.get(s.state, "[green]live[/]")
        error = f"at position {s.error_position}: {escape(s.error)}" if s.error is not None else "-"
        table.add_row(escape(s.name), state, str(s.position), str(s.behind), str(s.applied), error)
    out_console().print(table)


@projections_app.command("status")
@handled
def projections_status(
    ctx: typer.Context,
    db: DbOption = None,
    read_model: ReadModelOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Each projection's position, how far behind the feed it is, and its last error
    (exit 1 when one has failed)."""
    from ..feed import ProjectionRunner

    url = resolve_url(ctx, db)

    async def go() -> list[ProjectionStatus]:
        async with open_store(url, key_file=key_file) as store:
            await _store_admin(store)
            path = await _read_models_of(store, url, read_model)
            if not path.exists():  # never run: nothing to open (and nothing created)
                from ..feed import BUILTINS, ProjectionStatus

                head = (await store.feed_cursor_bounds()).head.total
                return [ProjectionStatus(n, 0, head, "new", 0) for n in sorted(BUILTINS)]
            async with ProjectionRunner(store, path) as runner:
                return await runner.status()

    rows = run(go())
    _status_rows(rows, json_out)
    if any(s.state == "failed" for s in rows):
        raise typer.Exit(1)


@projections_app.command("rebuild")
@handled
def projections_rebuild(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The projection to rebuild.")],
    db: DbOption = None,
    read_model: ReadModelOption = None,
    key_file: KeyFileOption = None,
    from_states: Annotated[
        bool,
        typer.Option(
            "--from-states",
            help="Start from every agent's current state, then the feed from its floor "
            "(what a rebuild does by itself once retention trimmed the feed).",
        ),
    ] = False,
    since_floor: Annotated[
        bool,
        typer.Option(
            "--since-floor",
            help="Replay only the events still in the feed (a projection that counts "
            "events, once retention trimmed the feed: it then counts from the floor on).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Empty a projection's read model and replay the feed into it from position 0.
    Resumable: run it again after an interruption and it goes on where it stopped.
    Once retention trimmed the feed, a projection that can (agent_states,
    agent_activity) is rebuilt from the agents' current states and the rest of the
    feed; one that counts events (tool_calls, transitions) is refused with what to do."""
    from ..feed import ProjectionRunner
    from .progress import bar

    url = resolve_url(ctx, db)

    async def go() -> tuple[int, int]:
        async with open_store(url, key_file=key_file) as store:
            await _store_admin(store)
            path = await _read_models_of(store, url, read_model)
            async with ProjectionRunner(store, path) as runner:
                runner.get(name)  # an unknown name fails before anything is touched
                head = (await store.feed_cursor_bounds()).head.total
                with bar(f"rebuild {name}", unit="positions", disable=json_out) as progress:
                    task = progress.add_task(name, total=head)
                    done = 0

                    def moved(position: int, target: int) -> None:
                        nonlocal done
                        progress.advance(task, max(0, min(position, head) - done))
                        done = max(done, min(position, head))

                    applied = await runner.rebuild(
                        name, progress=moved, from_states=from_states, since_floor=since_floor
                    )
                    return applied, runner.seeded

    applied, seeded = run(go())
    if json_out:
        from . import render

        render.print_json({"projection": name, "applied": applied, "seeded_agents": seeded})
    else:
        start = f" from the current states of {seeded} agent(s) and" if seeded else ""
        out_console().print(f"rebuilt {escape(name)}:{start} {applied} events applied")


@projections_app.command("run")
@handled
def projections_run(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None, typer.Argument(help="Projections to run [default: all].")
    ] = None,
    db: DbOption = None,
    read_model: ReadModelOption = None,
    key_file: KeyFileOption = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep following the feed until stopped.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Bring the projections up to the feed's head (and with --follow keep them there)."""
    from ..feed import ProjectionRunner

    url = resolve_url(ctx, db)

    async def go() -> dict[str, int]:
        async with open_store(url, key_file=key_file) as store:
            await _store_admin(store)
            path = await _read_models_of(store, url, read_model)
            async with ProjectionRunner(store, path) as runner:
                chosen = names or None
                if chosen:
                    for n in chosen:
                        runner.get(n)
                done = await runner.catch_up(chosen)
                if follow:
                    failures = await runner.run(chosen)
                    if failures:
                        raise failures[0]
                return done

    done = run(go())
    if json_out:
        from . import render

        render.print_json(done)
    else:
        for name, count in done.items():
            out_console().print(f"{escape(name)}: {count} events applied")


app.add_typer(projections_app)
