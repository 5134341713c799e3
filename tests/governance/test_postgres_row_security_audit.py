"""Under row-level security a tenant's role appends to the shared audit log and cannot
change it: an UPDATE of the log's events (renaming them away, overwriting payloads)
changes no row, and renaming the log's head row or moving it back is refused, while
the tenant's governed saves still write their entries. (Before: the role moved the
log's events to an agent of its own namespace, and the log was gone.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsa_")
    alice = f"sk_rlsa_alice_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{alice}" LOGIN')
    try:
        yield schema, alice
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{alice}"', f'DROP ROLE "{alice}"')


async def test_a_tenant_role_appends_to_the_audit_log_and_cannot_change_it(
    roles: tuple[str, str],
) -> None:
    schema, alice_role = roles
    policy = parse_policy(POLICY_TEXT)
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(
        owner_url, keyring=KEYRING, principal="ops", policy=policy, audit=Audit()
    ) as ops:
        await ops.save("globex/eu/g1", {"n": 1})
        await ops.save("acme/support/t1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"alice": alice_role})
    try:
        async with StateStore(
            f"{_as(alice_role)}?schema={schema}",
            keyring=KEYRING,
            principal="alice",
            policy=policy,
            audit=Audit(),
        ) as alice:
            await alice.save("acme/support/t2", {"n": 1})  # its entry is written
        t = sql.Identifier(schema)
        with psycopg.connect(_as(alice_role), autocommit=True) as conn:
            moved = conn.execute(
                sql.SQL(
                    "UPDATE {s}.sk_events SET agent_id = 'acme/support/gone' WHERE agent_id = %s"
                ).format(s=t),
                (AUDIT_STREAM,),
            )
            assert moved.rowcount == 0
            overwritten = conn.execute(
                sql.SQL("UPDATE {s}.sk_events SET payload = 'x' WHERE agent_id = %s").format(s=t),
                (AUDIT_STREAM,),
            )
            assert overwritten.rowcount == 0
            for change in (
                "agent_id = 'acme/support/gone'",
                "head_seq = 1",
            ):
                with pytest.raises(psycopg.Error):
                    conn.execute(
                        sql.SQL(
                            "UPDATE {s}.sk_agents SET " + change + " WHERE agent_id = %s"
                        ).format(s=t),  # type: ignore[arg-type]
                        (AUDIT_STREAM,),
                    )
        async with StateStore(owner_url, keyring=KEYRING) as owner:
            log = AuditLog(owner.backend, KEYRING)
            report = await log.verify()
            saved = [e.agent_id async for e in log.entries(operation="save")]
        assert report.ok, report.problems
        assert report.entries == 3
        assert saved == ["globex/eu/g1", "acme/support/t1", "acme/support/t2"]
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [alice_role])
