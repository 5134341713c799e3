"""Under row-level security a tenant's database role must not be able to stall every
other tenant from inside PostgreSQL.

Each tenant role was granted table-level ``UPDATE`` and ``DELETE`` on the store's tables,
and PostgreSQL lets a role holding either take any ``LOCK TABLE`` mode: ``LOCK TABLE
sk_agents IN ACCESS EXCLUSIVE MODE`` in a transaction kept open stalled every other
tenant's reads and writes, which neither row security nor ``audit_lock_timeout`` bounds.
Now (migration 25) a tenant role holds ``UPDATE`` on the columns its writes update only,
and deletes through functions of the schema's owner that apply the delete policies
for the calling role: PostgreSQL refuses its ``LOCK TABLE`` in every mode but
``ACCESS SHARE`` (reads) and ``ROW EXCLUSIVE`` (inserts), neither of which holds up a
read or a write.

The feed's advisory lock (``pg_advisory_xact_lock_shared(23117, ...)``, taken by every
insert of events) is callable by every role: ``EXECUTE`` on PostgreSQL's advisory lock
functions belongs to ``PUBLIC`` and only a superuser could revoke it, which a store on a
shared database cannot ask for. So it is bounded instead: under row security an insert
waits for it at most ``audit_lock_timeout`` and the write raises
:class:`~statekeeper.errors.FeedLocked`, nothing written; a tenant holding the lock
shared holds up no write (shared locks do not conflict).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied, BackendError, ConfigurationError, FeedLocked
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, tenant_roles

#: a deadline, not a wait: the unbounded waits ran until it
_DEADLINE = 30.0

_TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases",
           "sk_markers", "sk_grants", "sk_migrations", "sk_feed_floor")  # fmt: skip
_MODES = ("ACCESS EXCLUSIVE", "EXCLUSIVE", "SHARE ROW EXCLUSIVE", "SHARE",
          "SHARE UPDATE EXCLUSIVE", "ROW SHARE")  # fmt: skip


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlsk_", ["alice", "bob"]) as made:
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


def _store(schema: str, role: str, principal: str, timeout: float = 0.5) -> StateStore:
    return StateStore(
        f"{_as(role)}?schema={schema}&audit_lock_timeout={timeout}",
        keyring=KEYRING,
        principal=principal,
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    )


async def test_a_tenant_role_cannot_lock_a_table_against_the_others(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    refused: list[str] = []
    async with await psycopg.AsyncConnection.connect(_as(names["bob"])) as bob:
        for table in _TABLES:
            for mode in _MODES:
                try:
                    async with bob.transaction():
                        await bob.execute(
                            sql.SQL("LOCK TABLE {s}.{t} IN " + mode + " MODE NOWAIT").format(
                                s=sql.Identifier(schema), t=sql.Identifier(table)
                            )
                        )
                except psycopg.errors.InsufficientPrivilege:
                    refused.append(f"{table} {mode}")
                    continue
        # the two modes a read and an insert take anyway conflict with no write
        async with bob.transaction():
            for table in ("sk_agents", "sk_snapshots"):
                await bob.execute(
                    sql.SQL("LOCK TABLE {s}.{t} IN ROW EXCLUSIVE MODE").format(
                        s=sql.Identifier(schema), t=sql.Identifier(table)
                    )
                )
            async with _store(schema, names["alice"], "alice") as alice:
                await asyncio.wait_for(alice.save("acme/support/t2", {"n": 2}), _DEADLINE)
    assert len(refused) == len(_TABLES) * len(_MODES), sorted(
        {f"{t} {m}" for t in _TABLES for m in _MODES} - set(refused)
    )


async def test_every_tenant_write_path_works_with_column_grants(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with _store(schema, names["alice"], "alice") as alice:
        agent = "acme/support/w1"
        await alice.save(agent, {"n": 1}, idempotency_key="k1")
        await alice.save(agent, {"n": 2})
        await alice.save(agent, {"n": 3})
        await alice.snapshot(agent)
        await alice.save(agent, {"n": 4})
        backend = alice.backend
        assert isinstance(backend, PostgresBackend)
        head = await backend.head(agent)
        await backend.prune(agent, head - 1)  # its events up to the snapshot, its base
        assert (await alice.load(agent)).data == {"n": 4}
        lease = await backend.acquire_lease(agent, "me", 30.0)
        lease = await backend.renew_lease(agent, "me", lease.token, 30.0)
        assert await backend.release_lease(agent, "me", lease.token)
        assert await backend.expire_keys(agent, time.time() + 60) == 1
        assert await alice.delete(agent)
        assert not await alice.delete(agent)
        await alice.save("acme/support/w2", {"n": 1})
        w2 = await backend.head("acme/support/w2")
        assert await backend.delete_agent_at("acme/support/w2", w2)
        # another tenant's stream is refused, not deleted
        with pytest.raises(AccessDenied):
            await backend.delete_agent("globex/g1")
    async with StateStore(
        f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING, principal="ops"
    ) as admin:
        assert (await admin.load("globex/g1")).data == {"n": 1}


async def test_the_delete_functions_act_for_the_caller_only(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    s = sql.Identifier(schema)
    async with await psycopg.AsyncConnection.connect(_as(names["alice"])) as alice:
        # alice may not write globex/*: her own identity deletes nothing there
        cur = await alice.execute(
            sql.SQL("SELECT count(*) FROM {s}.sk_del_agents(current_user, %s, NULL, NULL)").format(
                s=s
            ),
            (["globex/g1"],),
        )
        assert await cur.fetchone() == (0,)
        # nor by naming bob's role (which may): she cannot be bob
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await alice.execute(
                sql.SQL("SELECT {s}.sk_del_events(%s, %s, NULL)").format(s=s),
                (names["bob"], "globex/g1"),
            )
        await alice.rollback()
        # nor by a search_path of her own: the functions pin theirs
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await alice.execute(sql.SQL("DELETE FROM {s}.sk_events").format(s=s))
    async with StateStore(
        f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING, principal="ops"
    ) as admin:
        assert (await admin.load("globex/g1")).data == {"n": 1}


async def _feed_lock(bob: psycopg.AsyncConnection, schema: str, shared: bool) -> None:
    call = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    await bob.execute(f"SELECT {call}(23117, hashtext(%s))", (f"statekeeper-feed:{schema}",))


async def test_a_tenant_holding_the_feed_lock_stalls_no_save_unbounded(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with (
        _store(schema, names["alice"], "alice") as alice,
        await psycopg.AsyncConnection.connect(_as(names["bob"])) as bob,
    ):
        await _feed_lock(bob, schema, shared=True)
        await asyncio.wait_for(alice.save("acme/support/t2", {"n": 2}), _DEADLINE)
        await bob.rollback()
        await _feed_lock(bob, schema, shared=False)
        with pytest.raises(FeedLocked) as caught:
            await asyncio.wait_for(alice.save("acme/support/t3", {"n": 3}), _DEADLINE)
        assert not caught.value.maybe_applied
        assert "feed" in str(caught.value) and "audit_lock_timeout" in str(caught.value)
        await bob.rollback()
        await alice.save("acme/support/t3", {"n": 3})  # once released
        assert (await alice.load("acme/support/t3")).data == {"n": 3}


async def test_the_bound_holds_on_a_connection_whose_session_setting_is_gone(
    roles: tuple[str, dict[str, str]],
) -> None:
    """Behind a transaction pooler (PgBouncer) a session's SET lands on one server
    connection only: another serves the next transaction with its own setting (none,
    or another client's 0). Each governed transaction sets the bound itself."""
    schema, names = roles
    await _prepared(schema, names)
    alice = StateStore(
        PostgresBackend(
            _as(names["alice"]), schema=schema, audit_lock_timeout=0.5, min_size=1, max_size=1
        ),
        keyring=KEYRING,
        principal="alice",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    )
    async with (
        alice,
        await psycopg.AsyncConnection.connect(_as(names["bob"])) as bob,
    ):
        await alice.save("acme/support/t2", {"n": 2})
        backend = alice.backend
        assert isinstance(backend, PostgresBackend)
        async with backend._connection() as conn:  # the pool's one connection
            await conn.execute("SET statekeeper.audit_lock_timeout = 0")
        await _feed_lock(bob, schema, shared=False)
        with pytest.raises(FeedLocked):
            await asyncio.wait_for(alice.save("acme/support/t3", {"n": 3}), _DEADLINE)
        await bob.rollback()
        await bob.execute(
            sql.SQL("SELECT 1 FROM {s}.sk_agents WHERE agent_id = %s FOR UPDATE").format(
                s=sql.Identifier(schema)
            ),
            ("\x01sk-audit/log",),
        )
        async with backend._connection() as conn:
            await conn.execute("RESET statekeeper.audit_lock_timeout")
            await conn.execute("SET statekeeper.audit_lock_timeout = 0")
        with pytest.raises(BackendError) as locked:
            await asyncio.wait_for(alice.save("acme/support/t3", {"n": 3}), _DEADLINE)
        assert "audit_lock_timeout" in str(locked.value) and not locked.value.maybe_applied
        await bob.rollback()


def test_an_audit_lock_timeout_past_the_socket_timeout_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PostgresBackend("postgresql://u@h/db", audit_lock_timeout=60, socket_timeout=60)
    assert "audit_lock_timeout (60" in str(caught.value)
    assert "socket_timeout (60" in str(caught.value)
    with pytest.raises(ConfigurationError):
        PostgresBackend("postgresql://u@h/db", audit_lock_timeout=0, socket_timeout=5)
    PostgresBackend("postgresql://u@h/db", audit_lock_timeout=4.5, socket_timeout=5)


async def test_a_store_under_row_security_before_migration_25_is_upgraded(
    roles: tuple[str, dict[str, str]],
) -> None:
    """A store put under row security by an older statekeeper: its tenant roles hold
    table-level UPDATE and DELETE, and no delete function exists. Opening it (as its
    owner) applies migration 25: the roles lose them, and go on writing."""
    schema, names = roles
    await _prepared(schema, names)
    s = sql.Identifier(schema)
    tables = sql.SQL(", ").join(
        sql.SQL("{s}.{t}").format(s=s, t=sql.Identifier(t)) for t in _TABLES[:5]
    )
    who = sql.SQL(", ").join(sql.Identifier(r) for r in names.values())
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as owner:
        owner.execute(sql.SQL("DELETE FROM {s}.sk_migrations WHERE version >= 25").format(s=s))
        owner.execute(sql.SQL("GRANT UPDATE, DELETE ON {t} TO {r}").format(t=tables, r=who))
        for function in ("sk_del_agents", "sk_del_events", "sk_del_snaps", "sk_del_keys"):
            owner.execute(sql.SQL("DROP FUNCTION {s}.{f}").format(s=s, f=sql.Identifier(function)))
    lock = sql.SQL("LOCK TABLE {s}.sk_agents IN ACCESS EXCLUSIVE MODE NOWAIT").format(s=s)
    with psycopg.connect(_as(names["bob"])) as bob:
        bob.execute(lock)  # (what the old grants allowed)
        bob.rollback()
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as upgraded:
        assert (await upgraded.load("globex/g1")).data == {"n": 1}
    with (
        psycopg.connect(_as(names["bob"])) as bob,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        bob.execute(lock)
    async with _store(schema, names["alice"], "alice") as alice:
        await alice.save("acme/support/u1", {"n": 1})
        assert await alice.delete("acme/support/u1")
        assert await alice.delete("acme/support/t1")
