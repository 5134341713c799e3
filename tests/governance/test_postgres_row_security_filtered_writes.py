"""Under PostgreSQL row-level security a DELETE or UPDATE the role may not make is not
refused by the server: its policies filter the rows away and the statement matches
nothing. A role that may only read a namespace then compacted, thinned, rewrote
(migrated), expired the idempotency records of, or renewed/released a lease of, a
stream there with nothing changed — reported done, "nothing to expire", "not the
current lease", a conflict or a bad argument. Each is AccessDenied naming the agent and
the role (never SQL), nothing changed; the role's own namespace still works."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import AppendRequest, AppendResult, RawEvent, RewriteRequest, StreamChange
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate

from ..backends._services import POSTGRES_DSN
from ..schema import apps
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, setup

__all__ = ["setup"]  # the fixture: two real roles, a unique schema

READ_ONLY, MINE = "acme/billing/b1", "acme/support/t1"  # alice: read / write
HIDDEN = "globex/eu/g1"  # alice: nothing; bob: write


def _refused(error: AccessDenied, agent_id: str, role: str, operation: str) -> None:
    message = str(error)
    assert error.agent_id == agent_id and error.permission == "write", message
    assert error.operation == operation, message
    assert f"on agent {agent_id!r}" in message and role in message, message
    assert "may not write that namespace" in message and "row-level security" in message
    for leak in ("SQL statement", "DELETE", "UPDATE", "sk_leases", "sk_agents", "CONTEXT"):
        assert leak not in message, message


async def _stored(agent_id: str, schema: str) -> tuple[Any, ...]:
    """Everything stored of ``agent_id``, as the owner reads it."""
    owner = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        snaps = [await owner.latest_snapshot(agent_id, below) for below in (None, 2, 1)]
        return (
            await owner.head_tag(agent_id),
            await owner.read(agent_id, 0),
            snaps,
            await owner.expire_keys(agent_id, 2e9, count_only=True),
            await owner.get_lease(agent_id),
        )
    finally:
        await owner.close()


async def _populate(schema: str) -> None:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        states = TypedStates(owner, apps.support_v1)
        for agent in (READ_ONLY, MINE):
            await states.create(agent, apps.SupportV1(customer_name="c", tags=["t"]))
            for i in range(3):
                if i == 2:
                    await owner.snapshot(agent)  # below the head: a base to compact to
                state = await states.load(agent)
                state.tags = [str(i)]
                await states.save(agent, state, idempotency_key=f"k{i}")
        await owner.backend.acquire_lease(READ_ONLY, "worker", 60)
        await states.create(HIDDEN, apps.SupportV1(customer_name="c", tags=["t"]))


async def test_filtered_writes_of_a_read_only_namespace_are_access_denied(
    setup: tuple[str, str, str],
) -> None:
    schema, alice_role, _ = setup
    await _populate(schema)
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    before = await _stored(READ_ONLY, schema)
    head, tag = before[0]
    snap_seq = before[2][0].seq
    lease = before[4]
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
    try:
        assert await raw.head(READ_ONLY) == head  # she reads it

        def rewrite(agent_id: str, at: int, at_tag: bytes | None) -> RewriteRequest:
            event = RawEvent(at, "patch", 1.0, b"rewritten", b"sum")
            return RewriteRequest(agent_id, at, at_tag, (event,), head_tag=b"new-tag")

        stored = (await raw.read(READ_ONLY, head - 1))[0]
        more = RawEvent(head + 1, stored.type, stored.timestamp, stored.payload, stored.checksum)
        append = AppendRequest(READ_ONLY, head, [more])
        mine_head = await raw.head(MINE)
        mine_more = RawEvent(mine_head + 1, stored.type, 1.0, stored.payload, stored.checksum)

        async def batch() -> None:  # each request answered on its own
            first = RawEvent(1, stored.type, 1.0, stored.payload, stored.checksum)
            answers = await raw.append_batch([append, AppendRequest(MINE + "-2", 0, [first])])
            assert isinstance(answers[1], AppendResult), answers  # hers: appended
            assert isinstance(answers[0], BaseException), answers
            raise answers[0]

        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            # an append to its stream: the head row's UPDATE filtered away, not a conflict
            ("append", lambda: raw.append(append)),
            ("append", batch),
            ("append", lambda: raw.append_together([append])),
            # a compaction with an append of her own stream, together: refused whole
            (
                "prune",
                lambda: raw.append_together(
                    [AppendRequest(MINE, mine_head, [mine_more])],
                    [StreamChange(READ_ONLY, prune_to=snap_seq)],
                ),
            ),
            ("prune", lambda: raw.prune(READ_ONLY, snap_seq)),  # compaction
            ("prune", lambda: raw.prune(READ_ONLY, 0, [snap_seq])),  # snapshot thinning
            ("rewrite", lambda: raw.rewrite(rewrite(READ_ONLY, head, tag))),
            ("expire_keys", lambda: raw.expire_keys(READ_ONLY, 2e9)),
            ("expire_keys", lambda: raw.expire_keys(None, 2e9)),  # every agent's
            ("lease", lambda: raw.renew_lease(READ_ONLY, "worker", lease.token, 60)),
            ("lease", lambda: raw.release_lease(READ_ONLY, "worker", lease.token)),
        ]
        for operation, call in calls:
            with pytest.raises(AccessDenied) as caught:
                await call()
            _refused(caught.value, READ_ONLY, alice_role, operation)
        # a stream she may not even read: refused too, not absent (a conflict at 0)
        with pytest.raises(AccessDenied) as caught:
            await raw.save_snapshot(HIDDEN, before[2][0])
        _refused(caught.value, HIDDEN, alice_role, "snapshot")
        # a page of rewrites with one she may not make: one commit, none of it written
        mine_head, mine_tag = await raw.head_tag(MINE)
        mine_before = await _stored(MINE, schema)
        page = [rewrite(MINE, mine_head, mine_tag), rewrite(READ_ONLY, head, tag)]
        with pytest.raises(AccessDenied) as caught:
            await raw.rewrite_many(page)
        _refused(caught.value, READ_ONLY, alice_role, "rewrite")
        assert await _stored(MINE, schema) == mine_before
        assert await _stored(READ_ONLY, schema) == before  # nothing changed
        async with StateStore(f"{_as(alice_role)}?schema={schema}", keyring=KEYRING) as alice:
            with pytest.raises(AccessDenied) as caught:
                await alice.save(READ_ONLY, {"customer_name": "x"})
            _refused(caught.value, READ_ONLY, alice_role, "append")
        assert await _stored(READ_ONLY, schema) == before
        # her own namespace: each still works
        mine_snap = mine_before[2][0].seq
        assert await raw.expire_keys(MINE, 2e9) == 3
        await raw.prune(MINE, mine_snap)
        assert [e.seq for e in await raw.read(MINE, 0)] == list(range(mine_snap + 1, mine_head + 1))
        assert await raw.rewrite_many(page[:1]) == [True]
        assert await raw.head_tag(MINE) == (mine_head, b"new-tag")
        taken = await raw.acquire_lease(MINE, "me", 60)
        await raw.renew_lease(MINE, "me", taken.token, 60)
        assert await raw.release_lease(MINE, "me", taken.token) is True
        assert await raw.release_lease(MINE, "me", taken.token) is False  # not hers now
    finally:
        await raw.close()


async def test_retention_and_migration_of_a_read_only_namespace_report_the_refusal(
    setup: tuple[str, str, str],
) -> None:
    """Through the store (no policy in Python: the database's alone): retention's
    compaction and key expiry, and a migration by rewrite, of a namespace the role may
    only read change nothing and report nothing done; where it may write they work."""
    schema, alice_role, bob_role = setup
    await _populate(schema)
    await enforce_in_postgres(
        POSTGRES_DSN,
        schema,
        parse_policy(POLICY_TEXT),
        roles={"alice": alice_role, "bob": bob_role},
    )
    before = {a: await _stored(a, schema) for a in (READ_ONLY, MINE)}
    alice_url = f"{_as(alice_role)}?schema={schema}"
    async with StateStore(alice_url, keyring=KEYRING) as alice:  # she reads acme/**
        with pytest.raises(AccessDenied) as caught:
            await migrate(alice, apps.support_v2)
        _refused(caught.value, READ_ONLY, alice_role, "rewrite")
    assert {a: await _stored(a, schema) for a in (READ_ONLY, MINE)} == before  # one page
    async with StateStore(alice_url, keyring=KEYRING, namespace="acme/billing") as alice:
        for rule in ("* keep_last=1", "* keys_ttl=1s"):  # compaction, key expiry
            report = await apply_retention(alice, RetentionPolicy.parse(rule), now=2e9)
            assert [a.outcome for a in report.actions] == ["refused"], report
            reason = report.actions[0].reason
            assert "row-level security" in reason and alice_role in reason, reason
    assert await _stored(READ_ONLY, schema) == before[READ_ONLY]
    async with StateStore(alice_url, keyring=KEYRING, namespace="acme/support") as alice:
        rules = RetentionPolicy.parse("* keep_last=1 keys_ttl=1s")
        report = await apply_retention(alice, rules, now=2e9)
        assert {a.kind: a.outcome for a in report.actions} == {
            "compact": "done",
            "expire-keys": "done",
        }, report
    bob_url = f"{_as(bob_role)}?schema={schema}"
    async with StateStore(bob_url, keyring=KEYRING) as bob:
        migrated = await migrate(bob, apps.support_v2)  # HIDDEN: his
        assert migrated.changed == 1 and migrated.ok, migrated
