"""How every command opens a store: one ``--key-file`` option, one opening helper.

* :data:`KeyFileOption` is the ``--key-file FILE`` option of every command that opens
  a store; without it the keys come from ``$STATEKEEPER_KEY_FILE``, else
  ``$STATEKEEPER_KEYS`` (:func:`env_keyring`).
* :func:`open_store` (over :mod:`statekeeper.store.opening`, which the web inspector
  uses too) opens a store **read-only by default** (SQLite ``mode=ro``, no DDL
  on PostgreSQL, no writes on Redis) and never creates one: something that is not a
  statekeeper store raises :class:`~statekeeper.errors.NotAStore` and is left as it
  was. A command that writes (``delete``, ``rekey``, ``langgraph prune``) passes
  ``readonly=False``: the store is still checked read-only first, so it is never
  created either. Only ``statekeeper init`` creates stores.
* ``--namespace NS`` (``$STATEKEEPER_NAMESPACE``) makes every store :func:`open_store`
  opens a view in that namespace (:func:`namespace_options`); commands that do not
  open their store here refuse the option (:mod:`.namespacing`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    "require_on",
    "require_store_admin",
]

ENV_KEY_FILE = "STATEKEEPER_KEY_FILE"
ENV_KEYS = "STATEKEEPER_KEYS"
ENV_PRINCIPAL = "STATEKEEPER_PRINCIPAL"
ENV_POLICY = "STATEKEEPER_POLICY"

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
    """The keyring from ``key_file``, else from the environment, else None
    (:func:`statekeeper.store.opening.configured_keyring`)."""
    from ..store.opening import configured_keyring

    return configured_keyring(key_file)


async def check_store(url: str) -> Backend:
    """Open ``url`` read-only and check it is a statekeeper store
    (:func:`statekeeper.store.opening.check_store`)."""
    from ..store.opening import check_store as check

    return await check(url)


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
    documentation; the opening itself is :func:`statekeeper.store.opening.open_existing`).
    ``need_key``: refuse to run without a key.
    """
    from ..store.opening import open_existing

    keyring = env_keyring(key_file)  # a bad key file fails before the store is touched
    if need_key and keyring is None:
        raise ConfigurationError(
            f"this command needs keys: pass --key-file or set ${ENV_KEY_FILE} / ${ENV_KEYS}"
        )
    governance = governance_options(keyring)
    governance.update(namespace_options())
    if governance.get("audit") is not None:
        readonly = False  # refusals (and reads, when audited) are appended to the audit log
    kept = None
    if keyring is not None and "principal" not in governance:
        from ..governance import Audit

        kept = Audit()  # without --as: a store that keeps an audit log records into it
    async with open_existing(
        url, keyring=keyring, readonly=readonly, audit_kept=kept, **governance
    ) as store:
        yield store


def refuse_in_memory(url: str, command: str) -> None:
    """Refuse ``url`` as the store ``command`` writes into to keep, when it is a private
    in-memory store (``memory://``, ``sqlite://``...): each command opens its own, empty,
    and it is gone when the command ends, so whatever was written would be lost while
    the command reported success."""
    from ..backends.url import is_in_memory

    if is_in_memory(url):
        raise ConfigurationError(
            f"{url} is a private in-memory store: it is empty when "
            f"`statekeeper {command}` starts and gone when it ends, so nothing it wrote "
            "would be kept; give a SQLite path or a server URL"
        )


async def require_on(store: StateStore, agent_id: str, permission: str, operation: str) -> None:
    """On a store opened under ``--as``: raise :class:`~statekeeper.errors.AccessDenied`
    (audited) unless the principal has ``permission`` on ``agent_id`` (the id as the
    command was given it, relative under ``--namespace``, as the error names it); for a
    command to refuse what it is about to do before it reads or asks anything."""
    from ..errors import AccessDenied
    from ..store.governed import governance_of
    from ..store.namespaced import stored_id

    gov = governance_of(store)
    if gov is None:
        return
    try:
        await gov.require(stored_id(store, agent_id), permission, operation)
    except AccessDenied as exc:
        relative = getattr(store, "relative_error", None)
        raise (relative(exc) if relative is not None else exc) from None


async def require_store_admin(url: str, key_file: Path | None, operation: str) -> None:
    """Under ``--as``: raise :class:`~statekeeper.errors.AccessDenied` (audited when the
    store keeps an audit log) unless the principal has ``admin`` on ``**``; nothing
    without ``--as``. For the commands that work on the whole store below its public
    calls (their own saver, the change feed's positions): what they show or change
    spans every tenant, so only a store administrator may run them."""
    if not os.environ.get(ENV_PRINCIPAL, "").strip():
        governance_options(None)  # --policy without --as: refused as everywhere
        return
    from ..governance.hooks import require_namespace

    async with open_store(url, key_file=key_file) as store:
        await require_namespace(store, "admin", operation)


def governance_options(keyring: Keyring | None) -> dict[str, Any]:
    """``principal``, ``policy`` and ``audit`` for :class:`StateStore` from ``--as`` /
    ``$STATEKEEPER_PRINCIPAL`` and ``--policy`` / ``$STATEKEEPER_POLICY`` (empty when
    no principal is given). The audit log is kept when the store has a key.
    """
    principal = os.environ.get(ENV_PRINCIPAL, "").strip()
    policy_file = os.environ.get(ENV_POLICY, "").strip()
    if not principal:
        if policy_file:
            raise ConfigurationError(f"--policy needs --as PRINCIPAL (or ${ENV_PRINCIPAL})")
        return {}
    if not policy_file:
        raise ConfigurationError(
            f"--as {principal} needs a policy: pass --policy FILE or set ${ENV_POLICY}"
        )
    from ..governance import Audit, load_policy

    return {
        "principal": principal,
        "policy": load_policy(policy_file),
        "audit": Audit() if keyring is not None else None,
    }


def namespace_options() -> dict[str, Any]:
    """``namespace`` for :class:`StateStore` from ``--namespace`` /
    ``$STATEKEEPER_NAMESPACE`` (empty when none is given; a malformed one is a
    :class:`~statekeeper.errors.ConfigurationError` naming it)."""
    from ..namespaces import check_namespace
    from .namespacing import current_namespace

    namespace = current_namespace()
    return {} if namespace is None else {"namespace": check_namespace(namespace)}
