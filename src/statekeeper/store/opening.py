"""Opening a store that already exists, for tools that inspect or repair one (the CLI,
the web inspector).

* :func:`configured_keyring`: the keys of a key file, else of the environment
  (``$STATEKEEPER_KEY_FILE``, else ``$STATEKEEPER_KEYS``), else none. The crypto
  modules are imported only when a key is configured.
* :func:`check_store` opens a URL's engine **read-only** (SQLite ``mode=ro``, no DDL
  on PostgreSQL, no writes on Redis) and checks it holds a statekeeper store:
  anything else raises :class:`~statekeeper.errors.NotAStore` and is left as it was.
* :func:`open_existing` is a :class:`~statekeeper.store.StateStore` over such a
  store, read-only by default. With ``readonly=False`` the store is still checked
  read-only first, so it is never created either: only ``statekeeper init`` (or an
  application opening its own store) creates one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring
    from .store import StateStore

__all__ = ["ENV_KEYS", "ENV_KEY_FILE", "check_store", "configured_keyring", "open_existing"]

#: the environment variables :meth:`Keyring.from_environment` reads (kept here too so
#: checking them does not import the crypto modules)
ENV_KEY_FILE = "STATEKEEPER_KEY_FILE"
ENV_KEYS = "STATEKEEPER_KEYS"


def configured_keyring(key_file: Path | None = None) -> Keyring | None:
    """The keyring from ``key_file``, else from the environment, else None.

    ``$STATEKEEPER_ACTIVE_KEY`` names the active key whichever of them gives the keys
    (``--key-file`` too, as ``$STATEKEEPER_KEY_FILE`` and ``$STATEKEEPER_KEYS``):
    before, a ``--key-file`` kept the file's ``"active"``, and an operator who set the
    variable to rotate wrote on under the old key, silently.

    Raises :class:`~statekeeper.errors.ConfigurationError` for a key file or variable
    that cannot be read (naming it, never showing a key), or an active key it lacks.
    """
    if key_file is not None:
        from ..codec.keys import ENV_ACTIVE, Keyring

        return Keyring.from_file(key_file, active=os.environ.get(ENV_ACTIVE, "").strip() or None)
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
async def open_existing(
    url: str,
    *,
    keyring: Keyring | None = None,
    readonly: bool = True,
    audit_kept: Any = None,
    **governance: Any,
) -> AsyncIterator[StateStore]:
    """The store at ``url``, opened with ``keyring``; read-only unless
    ``readonly=False``, and never created (see the module documentation).
    ``governance``: ``principal``, ``policy`` and ``audit`` (see :class:`StateStore`).

    ``audit_kept``: the ``audit`` (an :class:`~statekeeper.governance.Audit`) of a
    store opened without one that keeps an audit log already (and is given keys):
    every mutation of such a store is recorded there, its entry naming no principal,
    as it is under a principal (the store is then opened for writing, as a store
    opened with ``audit`` is). A store that keeps no log is opened as asked."""
    from .store import StateStore

    backend = await check_store(url)
    if audit_kept is not None and keyring is not None and governance.get("audit") is None:
        from ..arguments import AUDIT_STREAM

        try:
            kept = bool(await backend.head(AUDIT_STREAM))
        except BaseException:
            await backend.close()
            raise
        if kept:
            governance["audit"] = audit_kept
            readonly = False
    if not readonly:
        from ..backends.url import open_backend

        await backend.close()
        backend = open_backend(url)
    try:
        store = StateStore(backend, keyring=keyring, **governance)
    except BaseException:
        await backend.close()
        raise
    try:
        yield store
    finally:
        await store.close()
