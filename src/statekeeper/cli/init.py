"""``statekeeper init URL``: create an empty store, explicitly.

The other commands never create a store (they open it read-only, or check it exists
first); the library's write paths still create one on first use. ``init`` refuses to
write into a file that is something else (another application's database, an empty
or non-SQLite file): statekeeper only ever adds its tables to a file it creates.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import NotAStore, StoreSchemaOutdated
from . import render
from ._markup import escape
from .app import DbOption, JsonOption, app, handled, out_console, resolve_url, run, sqlite_file
from .stores import KeyFileOption, check_store, env_keyring, refuse_in_memory

__all__ = ["init"]


def _shown(url: str) -> str:
    """``url`` without its password (nor a secret option, a nested URL's password...)."""
    from ..backends.redact import mask_url

    return mask_url(url)


async def _create(url: str, dry_run: bool) -> tuple[str, int | None, int | None]:
    """Create the store at ``url``, or upgrade one of an older statekeeper's layout:
    ``("created" | "upgraded" | "current", the stored schema version before, after)``
    (versions None where unknown). ``dry_run``: only say which, nothing written."""
    from ..backends.url import open_backend

    path = sqlite_file(url)
    stored: int | None = None
    if path is not None:
        from ..backends.sqlite import SCHEMA_VERSION
        from ..backends.sqlite.files import describe, inspect_sqlite_file

        info = inspect_sqlite_file(path)
        if info.is_store:
            stored = int(info.detail) if info.detail.isdigit() else None
            if stored is None or stored >= SCHEMA_VERSION:
                await (await check_store(url)).close()  # also checks the URL's options
                return "current", stored, stored
        elif info.kind != "missing":
            raise NotAStore(
                str(path),
                f"it {describe(info)}; statekeeper creates a store only in a new file: "
                "choose a path that does not exist",
            )
    else:
        try:
            await (await check_store(url)).close()
            return "current", None, None
        except StoreSchemaOutdated as exc:
            # (was: refused, naming `statekeeper init URL` as the way to upgrade it)
            stored = exc.stored
        except NotAStore:
            pass
    if dry_run:
        return ("created" if stored is None else "upgraded"), stored, None
    backend = open_backend(url)  # a writable opening migrates an older layout
    try:
        await backend.initialize()
        after = await backend.schema_version() if stored is not None else None
    finally:
        await backend.close()
    return ("created" if stored is None else "upgraded"), stored, after


@app.command()
@handled
def init(
    ctx: typer.Context,
    url_arg: Annotated[
        str | None,
        typer.Argument(
            metavar="URL",
            help="Where to create the store [default: --db, $STATEKEEPER_URL, else the "
            "default file].",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say whether the store would be created or upgraded; write nothing.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Create an empty statekeeper store (a SQLite file, a PostgreSQL schema, a Redis
    prefix), or upgrade the layout of one an older statekeeper made (processes of the
    older version refuse it then: upgrade when none runs). Nothing happens when a
    current one is already there."""
    url = url_arg or resolve_url(ctx, db)
    refuse_in_memory(url, "init")
    env_keyring(key_file)  # a bad key file is reported before anything is created
    done, before, after = run(_create(url, dry_run))
    shown = escape(_shown(url))
    if json_out:
        render.print_json(
            {
                "url": _shown(url),
                "created": done == "created" and not dry_run,
                "upgraded": done == "upgraded" and not dry_run,
                "dry_run": dry_run,
                "would": done if dry_run else None,
                "schema_before": before,
                "schema_after": after,
            }
        )
        return
    if done == "current":
        text = f"{shown} is already a statekeeper store; nothing changed"
    elif dry_run:
        text = (
            f"would create an empty statekeeper store at {shown}; nothing written"
            if done == "created"
            else f"would upgrade {shown} from schema version {before}; nothing written"
        )
    elif done == "created":
        text = f"created an empty statekeeper store at {shown}"
    else:
        text = (
            f"upgraded {shown} from schema version {before} to {after} (processes of "
            "the statekeeper before refuse it from now on)"
        )
    out_console().print(text)
