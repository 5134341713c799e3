"""Under row-level security a grant on one-segment namespaces (``*``) does not reach
statekeeper's own streams.

The policy's patterns are matched against an id's namespace, and the audit log's and
the legal holds' ids (``"\\x01sk-audit/log"``, ``"\\x01sk-holds/registry"``) have
one-segment namespaces, which ``*`` matches as it matches ``acme``. So a role given
``write = ["*"]`` (every tenant's top namespace) read every entry of the audit log (every
tenant's ids and principals: a store administrator's alone) and deleted the legal holds
stream, releasing every hold. Two real roles on the shared server (unique, dropped
afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentOnHold
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy("""
[principals.tenants]
write = ["*"]

[principals.ops]
admin = ["**"]
""")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlso_")
    suffix = uuid.uuid4().hex[:8]
    tenants, ops = f"sk_rlso_t_{suffix}", f"sk_rlso_ops_{suffix}"
    _pg(f'CREATE ROLE "{tenants}" LOGIN', f'CREATE ROLE "{ops}" LOGIN')
    try:
        yield schema, tenants, ops
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{tenants}", "{ops}"', f'DROP ROLE "{tenants}"', f'DROP ROLE "{ops}"')


async def test_a_one_segment_grant_reaches_no_audit_entry_and_no_hold(
    setup: tuple[str, str, str],
) -> None:
    import psycopg

    schema, tenants, ops_role = setup
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/a", {"n": 1})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"tenants": tenants, "ops": ops_role}
    )
    async with StateStore(f"{_as(ops_role)}?schema={schema}", keyring=KEYRING,
                          principal="ops", policy=POLICY, audit=Audit()) as ops:  # fmt: skip
        await ops.save("globex/g", {"n": 1})
        await ops.save("acme/a", {"n": 2})
        await add_hold(ops, "globex/g", "Smith v. Globex")
    s = f'"{schema}"'
    log, holds = "chr(1) || 'sk-audit/log'", "chr(1) || 'sk-holds/registry'"
    with psycopg.connect(_as(tenants), autocommit=True) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT agent_id FROM {s}.sk_agents ORDER BY 1")]
        assert [i for i in ids if i[0] != "\x01"] == ["acme/a", "globex/g"]  # its grant
        read = conn.execute(f"SELECT count(*) FROM {s}.sk_events WHERE agent_id = {log}")
        assert read.fetchone() == (0,)  # not one entry of the audit log
        gone = conn.execute(f"SELECT 1 FROM {s}.sk_del_events(current_user, {holds}, NULL)")
        assert gone.rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
                f" VALUES ({holds}, 2, 'hold.remove', 0, '\\x00', '\\x00')"
            )
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        with pytest.raises(AgentOnHold):
            await owner.delete("globex/g")  # the hold still stands
        report = await AuditLog(owner.backend, KEYRING).verify()
        assert report.ok, report.problems
