"""How every command opens a store: one ``--key-file`` option, one opening helper.

* :data:`KeyFileOption` is the ``--key-file FILE`` option of every command that opens
  a store; without it the keys come from ``$STATEKEEPER_KEY_FILE``, else
  ``$STATEKEEPER_KEYS`` (:func:`env_keyring`).
* :func:`open_store` opens a store **read-only by default** (SQLite ``mode=ro``, no DDL
  on PostgreSQL, no writes on Redis) and never creates one: something that is not a
  statekeeper store raises :class:`~statekeeper.errors.NotAStore` and is left as it
  was. A command that writes (``delete``, ``rekey``, ``langgraph prune``) passes
  ``readonly=False``: the store is still checked read-only first, so it is never
  created either. Only ``statekeeper init`` creates stores.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring
    from ..store import StateStore

__all__ = [
    "ENV_KEYS",
    "ENV_KEY_FILE",
    "KeyFileOption",
    "check_store",
    "env_keyring",
    "open_store",
]

ENV_KEY_FILE = "STATEKEEPER_KEY_FILE"
ENV_KEYS = "STATEKEEPER_KEYS"

KeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--key-file",
        metavar="FILE",
        help=f"Key file (JSON: active + keys) [default: ${ENV_KEY_FILE}, else ${ENV_KEYS}]",
        show_default=False,
    ),
]


def env_keyring(key_file: Path | None = None) -> Keyring | None:
    """The keyring from ``key_file``, else from the environment, else None (imports the
    crypto modules only when a key is configured)."""
    if key_file is not None:
        from ..codec.keys import Keyring

        return Keyring.from_file(key_file)
    if os.environ.get(ENV_KEY_FILE, "").strip() or os.environ.get(ENV_KEYS, "").strip():
        from ..codec.keys import Keyring

        return Keyring.from_environment()
    return None


async def check_store(url: str) -> Backend:
    """Open ``url`` read-only and check it is a statekeeper store (raises
    :class:`~statekeeper.errors.NotAStore`, writing nothing); the caller closes the
    backend returned."""
    from ..backends.url import open_backend

    backend = open_backend(url, readonly=True)
    try:
        await backend.ensure_store()
    except BaseException:
        await backend.close()
        raise
    return backend


@asynccontextmanager
async def open_store(
    url: str,
    *,
    key_file: Path | None = None,
    readonly: bool = True,
    need_key: bool = False,
) -> AsyncIterator[StateStore]:
    """The store at ``url`` with the keys of ``--key-file`` / the environment.

    Read-only unless ``readonly=False``; never creates a store (see the module
    documentation). ``need_key``: refuse to run without a key.
    """
    from ..store import StateStore

    keyring = env_keyring(key_file)  # a bad key file fails before the store is touched
    if need_key and keyring is None:
        raise ConfigurationError(
            f"this command needs keys: pass --key-file or set ${ENV_KEY_FILE} / ${ENV_KEYS}"
        )
    backend = await check_store(url)
    if not readonly:
        from ..backends.url import open_backend

        await backend.close()
        backend = open_backend(url)
    store = StateStore(backend, keyring=keyring)
    try:
        yield store
    finally:
        await store.close()
