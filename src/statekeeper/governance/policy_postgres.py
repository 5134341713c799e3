"""A policy enforced by PostgreSQL itself: row-level security keyed on the namespace,
one database role per principal (see
:mod:`statekeeper.backends.postgres.row_security` for what the server checks).

::

    await enforce_in_postgres(
        "postgresql://owner@db/app", "agents", policy,
        roles={"support-bot": "support_bot", "ops": "ops"}, keyring=keyring,
    )

then each principal connects as its role: ``StateStore("postgresql://support_bot@db/app
?schema=agents", principal="support-bot", policy=policy)`` is checked twice, by the store
and by the server.

With ``keyring`` (the store's audit keyring: its key by default) the change is in the
store's audit log, as ``set_policy``'s is: a ``policy`` entry (no principal: the schema's
owner made it) naming the grants installed and the database roles, or the roles
revoked, recorded before the change (entry first; a change that then fails records a
second entry, outcome ``error:<ErrorType>``, voiding it). This policy is the one that
binds every role, so who changed it and when is what an auditor asks first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .policy import Policy

if TYPE_CHECKING:
    from ..codec.keys import Keyring

__all__ = ["enforce_in_postgres", "stop_enforcing_in_postgres"]


async def enforce_in_postgres(
    owner_dsn: str,
    schema: str,
    policy: Policy,
    roles: Mapping[str, str],
    *,
    keyring: Keyring | None = None,
) -> None:
    """Install ``policy`` for the principals of ``roles`` (principal -> database role)
    as row-level security on the store in ``schema`` (connected as its owner): every
    table of an agent's rows and the change feed (a role reads the feed events of the
    namespaces it may read; only the roles of principals that are admin of every
    namespace may trim the feed). With ``keyring``, recorded in the store's audit log."""
    from ..backends.postgres.row_security import install_row_security

    trimmers = [role for principal, role in roles.items() if policy.is_store_admin(principal)]
    detail = {"enforced_in": "postgresql", "grants": policy.to_dict(), "roles": dict(roles)}
    async with _recorded(owner_dsn, schema, keyring, detail):
        await install_row_security(
            owner_dsn, schema, policy.row_grants(roles), roles.values(), trimmers
        )


async def stop_enforcing_in_postgres(
    owner_dsn: str, schema: str, roles: Iterable[str], *, keyring: Keyring | None = None
) -> None:
    """Revoke the privileges and grants of the database ``roles`` on ``schema``. With
    ``keyring``, recorded in the store's audit log."""
    from ..backends.postgres.row_security import remove_row_security

    revoked = list(roles)
    async with _recorded(
        owner_dsn, schema, keyring, {"revoked_in": "postgresql", "roles": revoked}
    ):
        await remove_row_security(owner_dsn, schema, revoked)


@asynccontextmanager
async def _recorded(
    owner_dsn: str, schema: str, keyring: Keyring | None, detail: Mapping[str, Any]
) -> AsyncIterator[None]:
    """The change made in the ``with`` block, its ``policy`` entry first (with a
    ``keyring``; without one, the change alone)."""
    if keyring is None:
        yield
        return
    from ..backends.postgres import PostgresBackend
    from .audit import AuditLog

    backend = PostgresBackend(owner_dsn, schema=schema, min_size=1, max_size=1)
    try:
        log = AuditLog(backend, keyring)
        entry = await log.record("policy", principal=None, detail=detail)
        try:
            yield
        except Exception as exc:
            await log.record(
                "policy", principal=None, outcome=f"error:{type(exc).__name__}",
                detail={"voids": entry},
            )  # fmt: skip
            raise
    finally:
        await backend.close()
