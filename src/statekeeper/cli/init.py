"""``statekeeper init URL``: create an empty store, explicitly.

The other commands never create a store (they open it read-only, or check it exists
first); the library's write paths still create one on first use. ``init`` refuses to
write into a file that is something else (another application's database, an empty
or non-SQLite file): statekeeper only ever adds its tables to a file it creates.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from ..errors import NotAStore
from . import render
from ._markup import escape
from .app import DbOption, JsonOption, app, handled, out_console, resolve_url, run, sqlite_file
from .stores import KeyFileOption, check_store, env_keyring, refuse_in_memory

__all__ = ["init"]


def _shown(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


async def _create(url: str) -> bool:
    """Create the store at ``url``; False when one was already there."""
    from ..backends.url import open_backend

    path = sqlite_file(url)
    if path is not None:
        from ..backends.sqlite_files import describe, inspect_sqlite_file

        info = inspect_sqlite_file(path)
        if info.is_store:
            await (await check_store(url)).close()  # also checks the URL's options
            return False
        if info.kind != "missing":
            raise NotAStore(
                str(path),
                f"it {describe(info)}; statekeeper creates a store only in a new file: "
                "choose a path that does not exist",
            )
    else:
        try:
            await (await check_store(url)).close()
            return False
        except NotAStore:
            pass
    backend = open_backend(url)
    try:
        await backend.initialize()
    finally:
        await backend.close()
    return True


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
    json_out: JsonOption = False,
) -> None:
    """Create an empty statekeeper store (a SQLite file, a PostgreSQL schema, a Redis
    prefix). Nothing happens when one is already there."""
    url = url_arg or resolve_url(ctx, db)
    refuse_in_memory(url, "init")
    env_keyring(key_file)  # a bad key file is reported before anything is created
    created = run(_create(url))
    if json_out:
        render.print_json({"url": _shown(url), "created": created})
        return
    out_console().print(
        f"created an empty statekeeper store at {escape(_shown(url))}"
        if created
        else f"{escape(_shown(url))} is already a statekeeper store; nothing changed"
    )
