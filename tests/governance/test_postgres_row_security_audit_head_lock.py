"""Under row-level security every role may read the audit log's head row (its seq and tag:
a writer chains on them) and update it (each governed write moves it), so any role, a
tenant's included, can lock it: ``SELECT ... FOR UPDATE`` (or FOR NO KEY UPDATE, FOR
SHARE) in a transaction it keeps open. Row security cannot forbid a lock on a row the
role may read, and the role's own governed append, its transaction left open, holds the
same lock. Every governed write of the store then waited on it for as long as that
transaction stayed open (bounded only by ``socket_timeout``, then retried as a lost
connection until ``retry_timeout``).

Now a governed write waits for the log's head at most ``audit_lock_timeout`` seconds
(``sk_audit_head_lock``, migration 24) and raises
:class:`~statekeeper.errors.AuditLogLocked` (a ``BackendError``, nothing written, worth a
retry) naming the cause; once the lock is released the same write commits, and the log
verifies. A ``FOR KEY SHARE`` lock never stalls one (the head is locked ``FOR NO KEY
UPDATE``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.backends.postgres import PostgresBackend, parse_postgres_url
from statekeeper.errors import AuditLogLocked, BackendError, ConfigurationError
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, tenant_roles

#: a deadline for the save, not a wait: the unfixed store waited socket_timeout (60 s)
#: and longer
_DEADLINE = 30.0


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlsl_", ["alice", "bob"]) as made:
        yield made


async def _prepared(schema: str, roles: dict[str, str]) -> None:
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(
        f"{POSTGRES_DSN}?schema={schema}",
        keyring=KEYRING,
        principal="ops",
        policy=policy,
        audit=Audit(),
    ) as ops:
        await ops.save("acme/support/t1", {"n": 1})
        await ops.save("globex/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles=roles)


def _alice(schema: str, role: str) -> StateStore:
    return StateStore(
        f"{_as(role)}?schema={schema}&audit_lock_timeout=0.5",
        keyring=KEYRING,
        principal="alice",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    )


async def _lock_head(bob: psycopg.AsyncConnection, schema: str, mode: str) -> None:
    cur = await bob.execute(
        sql.SQL("SELECT head_seq FROM {s}.sk_agents WHERE agent_id = %s FOR " + mode).format(
            s=sql.Identifier(schema)
        ),
        (AUDIT_STREAM,),
    )
    assert await cur.fetchall(), "bob's role reads (and so locks) the log's head row"


@pytest.mark.parametrize("mode", ["UPDATE", "NO KEY UPDATE", "SHARE"])
async def test_a_tenant_locking_the_log_head_stalls_no_governed_save(
    roles: tuple[str, dict[str, str]], mode: str
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with (
        _alice(schema, names["alice"]) as alice,
        await psycopg.AsyncConnection.connect(_as(names["bob"])) as bob,
    ):
        await _lock_head(bob, schema, mode)
        with pytest.raises(AuditLogLocked) as caught:
            await asyncio.wait_for(alice.save("acme/support/t2", {"n": 2}), _DEADLINE)
        assert isinstance(caught.value, BackendError)
        assert not caught.value.maybe_applied
        assert "audit log" in str(caught.value) and "audit_lock_timeout" in str(caught.value)
        # a governed change (a delete: its own locks, then the log's head) neither
        with pytest.raises(AuditLogLocked):
            await asyncio.wait_for(alice.delete("acme/support/t1"), _DEADLINE)
        await bob.rollback()
        await alice.save("acme/support/t2", {"n": 2})  # the same write, once released
        assert (await alice.load("acme/support/t2")).data == {"n": 2}
        await alice.delete("acme/support/t1")
    async with StateStore(
        f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING, principal="ops"
    ) as admin:
        report = await AuditLog(admin.backend, KEYRING).verify()
        assert report.ok, report


async def test_a_key_share_lock_of_the_log_head_holds_up_nothing(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with (
        _alice(schema, names["alice"]) as alice,
        await psycopg.AsyncConnection.connect(_as(names["bob"])) as bob,
    ):
        await _lock_head(bob, schema, "KEY SHARE")
        await asyncio.wait_for(alice.save("acme/support/t2", {"n": 2}), _DEADLINE)
        await asyncio.wait_for(alice.delete("acme/support/t1"), _DEADLINE)
        await bob.rollback()


def test_the_audit_lock_timeout_option() -> None:
    dsn, options = parse_postgres_url("postgresql://u@h/db?audit_lock_timeout=0.25&x=1")
    assert options == {"audit_lock_timeout": 0.25} and "audit_lock_timeout" not in dsn
    assert PostgresBackend("postgresql://u@h/db").audit_lock_timeout == 10.0
    # (below socket_timeout: at or past it the watchdog ends the wait first, as a lost
    # connection; 0 was "no bound", which is that)
    assert PostgresBackend("postgresql://u@h/db", socket_timeout=1).audit_lock_timeout == 0.5
    for wrong in (-1.0, float("nan"), 0, 60.0):
        with pytest.raises(ConfigurationError, match="audit_lock_timeout"):
            PostgresBackend("postgresql://u@h/db", audit_lock_timeout=wrong)
