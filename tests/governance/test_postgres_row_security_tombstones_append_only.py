"""Under row-level security a namespace's feed tombstones are append-only for a tenant's
role, and a tenant's ``forget`` writes its intent before the key goes.

Before:

* the head row of a namespace's tombstone stream (``sk_agents``) was updatable by every
  role that may write the namespace (its appends move it), in any way: one ``UPDATE`` of
  the tenant's moved it back (every later delete of the namespace, the store admin's
  too, failed: ``RetriesExhausted``, or a duplicate key) or renamed it away (the row
  listed as an agent of the tenant's, the stream's head 0);
* a ``forget`` there wrote no intent (a tenant's role may write no stream of the whole
  store): a crash between the key's destruction and the tombstone left every read
  model holding the forgotten agent, on no engine else.

Real roles on the shared server (unique, dropped afterwards)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.codec import ZERO_LINK
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.shredding import forget
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store import feed_deletes
from statekeeper.store.feed_intents import PENDING

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.a-admin]
admin = ["tenant-a/**"]

[principals.b-app]
write = ["tenant-b/**"]
read = ["tenant-a/**"]

[principals.ops]
admin = ["**"]
"""
)
PRINCIPALS = ("a-admin", "b-app", "ops")
STREAM_A = feed_deletes.stream_of_namespace("tenant-a")


class _Crash(BaseException):
    """The process dies here."""


@pytest.fixture
def enforced(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlao_", PRINCIPALS) as made:
        yield made


def _open(schema: str, roles: dict[str, str], principal: str, **options: Any) -> StateStore:
    options.setdefault("keyring", KEYRING)
    return StateStore(
        f"{_as(roles[principal])}?schema={schema}", principal=principal, policy=POLICY,
        audit=Audit(), **options,
    )  # fmt: skip


async def _enforce(schema: str, roles: dict[str, str], keyring: Keyring = KEYRING) -> None:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=keyring) as owner:
        for agent_id in ("tenant-a/t1", "tenant-a/t2", "tenant-a/t3", "tenant-b/u1"):
            for n in range(2):
                await owner.save(agent_id, {"n": n})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)


def _as_role(role: str, schema: str, statement: str, *params: Any) -> None:
    with psycopg.connect(_as(role), autocommit=True) as conn:
        conn.execute(statement.format(s=f'"{schema}"'), params)  # type: ignore[arg-type]


async def _tombstones(store: StateStore) -> list[tuple[str, int, bool]]:
    return [
        (c.agent_id, c.seq, bool(c.event.info.get("forgotten")))
        async for c in store.subscribe(stop_at_head=True)
        if c.deleted
    ]


async def test_a_tenant_cannot_move_its_tombstone_streams_head(
    enforced: tuple[str, dict[str, str]],
) -> None:
    schema, roles = enforced
    await _enforce(schema, roles)
    async with _open(schema, roles, "a-admin") as tenant_a:
        assert await tenant_a.delete("tenant-a/t1")
    tenant = roles["a-admin"]
    refused = [
        ("UPDATE {s}.sk_agents SET head_seq = 0 WHERE agent_id = %s", (STREAM_A,)),
        ("UPDATE {s}.sk_agents SET head_tag = NULL WHERE agent_id = %s", (STREAM_A,)),
        ("UPDATE {s}.sk_agents SET agent_id = 'tenant-a/moved' WHERE agent_id = %s", (STREAM_A,)),
        (  # another row onto a tombstone stream's name (of a namespace without one yet)
            "UPDATE {s}.sk_agents SET agent_id = %s WHERE agent_id = 'tenant-a/t3'",
            (feed_deletes.stream_of_namespace("tenant-a/eu"),),
        ),
    ]
    for statement, params in refused:
        # (a rename: no UPDATE of agent_id for a tenant role at all since migration 25)
        match = "permission denied" if "SET agent_id" in statement else "append-only"
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=match):
            _as_role(tenant, schema, statement, *params)  # (each went through, before)
    async with _open(schema, roles, "ops") as ops:
        assert await ops.backend.head(STREAM_A) == 1
        assert await ops.delete("tenant-a/t2")  # (RetriesExhausted, before)
        assert [a.agent_id for a in await ops.list_agents()] == ["tenant-a/t3", "tenant-b/u1"]
    async with _open(schema, roles, "a-admin") as tenant_a:
        assert await tenant_a.delete("tenant-a/t3")  # its own appends still move it forward
        assert await _tombstones(tenant_a) == [
            ("tenant-a/t1", 2, False),
            ("tenant-a/t2", 2, False),
            ("tenant-a/t3", 2, False),
        ]
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        assert await owner.backend.head(STREAM_A) == 3


def _shredding_keyring(tmp_path: Path) -> Keyring:
    return Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(str(tmp_path / "vault.db")))


@contextlib.asynccontextmanager
async def _crashing(store: StateStore) -> AsyncIterator[StateStore]:
    """``store``, whose process dies as it appends a feed tombstone."""
    real = store.backend.append

    async def crash(request: Any) -> Any:
        if feed_deletes.is_tombstone_stream(request.agent_id):
            raise _Crash("append")
        return await real(request)

    store.backend.append = crash  # type: ignore[method-assign]
    try:
        yield store
    finally:
        store.backend.append = real  # type: ignore[method-assign]
        with contextlib.suppress(Exception):
            await store.close()


async def test_a_tenants_forget_a_crash_stopped_is_finished_by_its_next_delete(
    enforced: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    schema, roles = enforced
    keyring = _shredding_keyring(tmp_path)
    await _enforce(schema, roles, keyring)
    async with _crashing(_open(schema, roles, "a-admin", keyring=keyring)) as tenant_a:
        with pytest.raises(_Crash):
            await forget(tenant_a, "tenant-a/t1")
    keyring = _shredding_keyring(tmp_path)
    async with _open(schema, roles, "ops", keyring=keyring) as ops:
        assert await _tombstones(ops) == []  # the key is gone, the feed never told
        report = await ops.verify()  # the whole store's names it (writes nothing)
        problems = [(p.agent_id, p.seq, p.kind) for p in report.problems]
        assert ("tenant-a/t1", 2, "feed") in problems  # (no intent was written, before)
    async with _open(schema, roles, "a-admin", keyring=keyring) as tenant_a:
        assert await tenant_a.count_agents() == 3  # (its intent is no agent)
        assert await tenant_a.delete("tenant-a/t2")  # the next delete finishes it
    async with _open(schema, roles, "ops", keyring=keyring) as ops:
        assert await _tombstones(ops) == [("tenant-a/t1", 2, True), ("tenant-a/t2", 2, False)]
        assert await ops.backend.count_prefix(PENDING) == 0


async def test_an_intent_is_left_by_a_role_that_may_not_write_its_namespace(
    enforced: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    schema, roles = enforced
    keyring = _shredding_keyring(tmp_path)
    await _enforce(schema, roles, keyring)
    async with _crashing(_open(schema, roles, "a-admin", keyring=keyring)) as tenant_a:
        with pytest.raises(_Crash):
            await forget(tenant_a, "tenant-a/t1")
    keyring = _shredding_keyring(tmp_path)
    async with _open(schema, roles, "b-app", keyring=keyring) as tenant_b:
        # it reads tenant-a's intent, may not finish it: its own delete goes on
        assert await tenant_b.delete("tenant-b/u1")
        assert await tenant_b.backend.count_prefix(PENDING) == 1
    async with _open(schema, roles, "ops", keyring=keyring) as ops:
        assert await ops.delete("tenant-a/t3")  # a role that may write it finishes it
        assert await _tombstones(ops) == [
            ("tenant-b/u1", 2, False),
            ("tenant-a/t1", 2, True),
            ("tenant-a/t3", 2, False),
        ]


async def test_a_forged_intent_of_another_namespaces_agent_writes_no_tombstone(
    enforced: tuple[str, dict[str, str]],
) -> None:
    schema, roles = enforced
    await _enforce(schema, roles)
    async with _open(schema, roles, "b-app") as tenant_b:
        codec, backend = tenant_b.codec, tenant_b.backend
        # tenant b's own namespace's intent stream, naming tenant a's agent: a delete
        # whose head event is not there any more (the checksum names none)
        stream = f"{PENDING}in/tenant-b/{'0' * 32}"
        body = {"agent_id": "tenant-a/t1", "head": 2, "checksum": "00" * 32, "forgotten": False}
        ts = time.time()
        sealed = codec.encode(stream, 1, "statekeeper.delete_intent", ts, body, ZERO_LINK)
        raw = RawEvent(1, "statekeeper.delete_intent", ts, sealed.payload, sealed.checksum)
        await backend.append(AppendRequest(stream, 0, [raw]))
        # ...and none in tenant a's
        with pytest.raises(AccessDenied):
            await backend.append(AppendRequest(f"{PENDING}in/tenant-a/{'1' * 32}", 0, [raw]))
    async with _open(schema, roles, "ops") as ops:
        assert await ops.delete("tenant-b/u1")  # settles the intents it finds
        assert await _tombstones(ops) == [("tenant-b/u1", 2, False)]  # none of tenant-a/t1
        assert await ops.backend.count_prefix(PENDING) == 0
        assert (await ops.load("tenant-a/t1")).data == {"n": 1}


def _sealed_intent(store: StateStore, stream: str, body: dict[str, Any]) -> RawEvent:
    ts = time.time()
    sealed = store.codec.encode(stream, 1, "statekeeper.delete_intent", ts, body, ZERO_LINK)
    return RawEvent(1, "statekeeper.delete_intent", ts, sealed.payload, sealed.checksum)


async def test_an_intent_a_tenant_wrote_unreadable_fails_no_other_tenants_delete(
    enforced: tuple[str, dict[str, str]],
) -> None:
    """A namespace's intents are written by the roles that may write it: one record
    that does not open, written by tenant a's role, made every delete of every role
    that may read tenant a (tenant b's own, the store admin's of every namespace) and
    the whole store's ``verify`` fail (``IntegrityError``), for good."""
    schema, roles = enforced
    await _enforce(schema, roles)
    stream = f"{PENDING}in/tenant-a/{'2' * 32}"
    async with _open(schema, roles, "a-admin") as tenant_a:
        raw = RawEvent(1, "statekeeper.delete_intent", time.time(), b"garbage", b"\0" * 32)
        await tenant_a.backend.append(AppendRequest(stream, 0, [raw]))
    async with _open(schema, roles, "b-app") as tenant_b:
        assert await tenant_b.delete("tenant-b/u1")  # (IntegrityError, before)
    async with _open(schema, roles, "ops") as ops:
        assert await ops.delete("tenant-a/t2")  # (IntegrityError, before)
        report = await ops.verify()  # names it (IntegrityError, before)
        assert [(p.agent_id, p.kind) for p in report.problems] == [(stream, "feed")]
        assert await ops.backend.count_prefix(PENDING) == 1  # left as it is
        assert await _tombstones(ops) == [("tenant-b/u1", 2, False), ("tenant-a/t2", 2, False)]


async def test_a_tenants_intent_its_tombstones_refuse_fails_no_other_tenants_delete(
    enforced: tuple[str, dict[str, str]],
) -> None:
    """Tenant a's role writes an intent of its namespace whose tombstone its stream
    does not take (its head moved past its last record): settling it raised a
    ``ConflictError`` of tenant a's tombstone stream out of tenant b's own delete."""
    schema, roles = enforced
    await _enforce(schema, roles)
    stream = f"{PENDING}in/tenant-a/{'3' * 32}"
    async with _open(schema, roles, "a-admin") as tenant_a:
        assert await tenant_a.delete("tenant-a/t1")
        body = {"agent_id": "tenant-a/t3", "head": 2, "checksum": "00" * 32, "forgotten": False}
        raw = _sealed_intent(tenant_a, stream, body)
        await tenant_a.backend.append(AppendRequest(stream, 0, [raw]))
    _as_role(
        roles["a-admin"], schema,
        "UPDATE {s}.sk_agents SET head_seq = head_seq + 1 WHERE agent_id = %s", STREAM_A,
    )  # fmt: skip
    async with _open(schema, roles, "b-app") as tenant_b:
        assert await tenant_b.delete("tenant-b/u1")  # (ConflictError, before)
        assert await tenant_b.backend.count_prefix(PENDING) == 1
