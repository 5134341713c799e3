"""A tiered store whose tier of record is PostgreSQL under row-level security takes
the tier's audit flags as they are when it opens (``Backend.audit_links``,
``Backend.reads_audit_log``), as a plain PostgreSQL store does.

Before, ``TieredBackend`` kept the class defaults (no links, reads the log): through a
tenant's role ``audit verify`` reported entries of other tenants "missing (deleted)"
and their events "removed without the audit log" — a false alarm of tampering where
the plain store refuses with ``AccessDenied`` — and the tenant's audit appends chained
by reading the log instead of by the head's sealed link.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.url import open_backend
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, AuditLog

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles
from .test_postgres_row_security_audit_refused import POLICY, _seeded


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlt_", ["acme-app", "ops"]) as made:
        yield made


def _tiered(role: str, schema: str) -> TieredBackend:
    return TieredBackend(open_backend(f"{_as(role)}?schema={schema}"), hot=MemoryBackend())


async def test_a_tenant_role_through_a_tiered_store_is_refused_the_log(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _seeded(schema, roles)
    async with StateStore(_tiered(roles["acme-app"], schema), keyring=KEYRING) as acme:
        with pytest.raises(AccessDenied, match="may not read its entries"):
            await AuditLog(acme.backend, KEYRING).verify()
    async with StateStore(_tiered(roles["ops"], schema), keyring=KEYRING) as ops:
        assert (await AuditLog(ops.backend, KEYRING).verify()).ok  # an admin's role reads it


async def test_a_tenant_writes_through_a_tiered_store_on_the_sealed_link(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _seeded(schema, roles)
    tier = _tiered(roles["acme-app"], schema)
    opened = StateStore(tier, keyring=KEYRING, principal="acme-app", policy=POLICY, audit=Audit())
    async with opened as acme:
        await acme.save("acme/a2", {"n": 2})
        assert tier.audit_links and not tier.reads_audit_log  # the tier of record's, opened
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        report = await AuditLog(owner.backend, KEYRING).verify()
        assert report.ok, report.problems
        assert report.entries == 3
