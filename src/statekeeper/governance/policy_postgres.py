"""A policy enforced by PostgreSQL itself: row-level security keyed on the namespace,
one database role per principal (see
:mod:`statekeeper.backends.postgres.row_security` for what the server checks).

::

    await enforce_in_postgres(
        "postgresql://owner@db/app", "agents", policy,
        roles={"support-bot": "support_bot", "ops": "ops"},
    )

then each principal connects as its role: ``StateStore("postgresql://support_bot@db/app
?schema=agents", principal="support-bot", policy=policy)`` is checked twice, by the store
and by the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .policy import Policy

__all__ = ["enforce_in_postgres", "stop_enforcing_in_postgres"]


async def enforce_in_postgres(
    owner_dsn: str, schema: str, policy: Policy, roles: Mapping[str, str]
) -> None:
    """Install ``policy`` for the principals of ``roles`` (principal -> database role)
    as row-level security on the store in ``schema`` (connected as its owner): every
    table of an agent's rows and the change feed (a role reads the feed events of the
    namespaces it may read; only the roles of principals that are admin of every
    namespace may trim the feed)."""
    from ..backends.postgres.row_security import install_row_security

    trimmers = [role for principal, role in roles.items() if policy.is_store_admin(principal)]
    await install_row_security(
        owner_dsn, schema, policy.row_grants(roles), roles.values(), trimmers
    )


async def stop_enforcing_in_postgres(owner_dsn: str, schema: str, roles: Iterable[str]) -> None:
    """Revoke the privileges and grants of the database ``roles`` on ``schema``."""
    from ..backends.postgres.row_security import remove_row_security

    await remove_row_security(owner_dsn, schema, roles)
