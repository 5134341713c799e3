"""A tenant's database role may append to the audit log but not read it: listing,
verifying or re-encrypting the log through it is refused or left alone, never
reported as an empty or damaged log.

Before, connected as ``acme``'s role (row-level security, no ``--as``):
``statekeeper audit`` printed "no audit entries" and ``statekeeper audit verify``
"problem: the log's head says N entries but it ends at entry 0 (truncated) ... FAILED"
(exit 1: a false alarm of tampering), and ``statekeeper rekey`` re-encrypted the
tenant's agents, then failed on the log it cannot read with "integrity check failed
for the store's audit log".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.security.rekey import rekey
from tests.keyfiles import write_key_file

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from ..cli._subprocess import cli_in_process, one_error_line
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy(
    """\
[principals.acme-app]
write = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rla_")
    suffix = uuid.uuid4().hex[:8]
    roles = {"acme-app": f"sk_rla_acme_{suffix}", "ops": f"sk_rla_ops_{suffix}"}
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in roles.values()))
    try:
        yield schema, roles
    finally:
        drop_schema(schema)
        _pg(*(f'DROP OWNED BY "{r}"' for r in roles.values()))
        _pg(*(f'DROP ROLE "{r}"' for r in roles.values()))


async def _seeded(schema: str, roles: dict[str, str]) -> None:
    url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit()) as s:
        await s.save("acme/a1", {"n": 1})
        await s.save("globex/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)


async def test_a_tenant_role_is_refused_the_log_it_cannot_read(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _seeded(schema, roles)
    async with StateStore(f"{_as(roles['acme-app'])}?schema={schema}", keyring=KEYRING) as acme:
        with pytest.raises(AccessDenied, match="may not read its entries") as refused:
            await AuditLog(acme.backend, KEYRING).verify()
        assert refused.value.principal == roles["acme-app"]
    async with StateStore(f"{_as(roles['ops'])}?schema={schema}", keyring=KEYRING) as ops:
        assert (await AuditLog(ops.backend, KEYRING).verify()).ok  # an admin's role reads it


def test_statekeeper_audit_as_a_tenant_role_exits_4(
    store: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    import asyncio

    schema, roles = store
    asyncio.run(_seeded(schema, roles))
    keys = write_key_file(
        tmp_path / "keys.json",
        {"active": "k1", "keys": {"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}},
    )
    url = f"{_as(roles['acme-app'])}?schema={schema}"
    for command in (["audit"], ["audit", "verify"]):
        run = cli_in_process(*command, "--db", url, "--key-file", str(keys))
        assert run.code == 4, run
        assert "may not read its entries" in one_error_line(run)
    run = cli_in_process("audit", "verify", "--db", f"{_as(roles['ops'])}?schema={schema}",
                         "--key-file", str(keys))  # fmt: skip
    assert run.code == 0, run


async def test_rekey_as_a_tenant_role_re_encrypts_its_agents_and_leaves_the_log(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _seeded(schema, roles)
    url = f"{_as(roles['acme-app'])}?schema={schema}"
    async with StateStore(url, keyring=KEYRING) as acme:
        stats = await rekey(acme)
        assert stats.agents == 1  # acme/a1: its own, the log left as it is
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        assert (await AuditLog(owner.backend, KEYRING).verify()).ok
