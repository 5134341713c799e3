"""A policy installed in (or revoked from) PostgreSQL is in the store's audit log.

``enforce_in_postgres`` is the policy that binds every database role, yet installing
or replacing it (granting ``acme``'s role ``globex``'s namespace, say) left no entry:
the log showed what each principal did, never when what it was allowed changed.
Given the store's keyring, the owner's change is now a ``policy`` entry (no principal),
written before the change, as ``set_policy``'s is in the process; one that fails is
voided by a second entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError
from statekeeper.governance import AuditLog, parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _pg

POLICY = parse_policy('[principals.acme-app]\nwrite = ["acme/**"]\n')
WIDER = parse_policy('[principals.acme-app]\nwrite = ["acme/**"]\nread = ["globex/**"]\n')


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlp_")
    role = f"sk_rlp_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield schema, role
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')


async def _entries(schema: str) -> list[tuple[str | None, str, str, dict[str, object]]]:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        log = AuditLog(owner.backend, KEYRING)
        assert (await log.verify()).ok
        return [
            (e.principal, e.operation, e.outcome, dict(e.detail))
            async for e in log.entries()
            if e.operation == "policy"
        ]


async def test_installing_replacing_and_revoking_a_policy_is_audited(
    store: tuple[str, str],
) -> None:
    schema, role = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/g1", {"n": 1})
    roles = {"acme-app": role}
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles, keyring=KEYRING)
    await enforce_in_postgres(POSTGRES_DSN, schema, WIDER, roles, keyring=KEYRING)
    await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [role], keyring=KEYRING)
    assert await _entries(schema) == [
        (None, "policy", "ok", {
            "enforced_in": "postgresql", "grants": POLICY.to_dict(), "roles": roles,
        }),
        (None, "policy", "ok", {
            "enforced_in": "postgresql", "grants": WIDER.to_dict(), "roles": roles,
        }),
        (None, "policy", "ok", {"revoked_in": "postgresql", "roles": [role]}),
    ]  # fmt: skip


async def test_a_policy_that_fails_to_install_is_voided(store: tuple[str, str]) -> None:
    schema, _ = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/g1", {"n": 1})
    missing = {"acme-app": f"sk_rlp_missing_{uuid.uuid4().hex[:8]}"}  # no such role
    with pytest.raises(
        ConfigurationError, match=r"database role 'sk_rlp_missing_.*' does not exist"
    ):
        await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, missing, keyring=KEYRING)
    entries = await _entries(schema)
    assert [(op, outcome) for _, op, outcome, _ in entries] == [
        ("policy", "ok"),
        ("policy", "error:ConfigurationError"),
    ]
    assert entries[1][3] == {"voids": 1}  # (the log's first entry: the owner's save logged none)
