"""Retention's ``keys_ttl``: idempotency records older than the rule says are forgotten
(held agents skipped, a dry run counts, every action audited); without the setting
every record stays (the exactly-once guarantee has no time limit by default)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import Steps
from statekeeper.errors import RetentionPolicyError
from statekeeper.governance.hooks import GovernanceEvent
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

DAY = 86400.0
POLICY = RetentionPolicy.parse("* keys_ttl=30d\nhold held/a\n")


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql"])
async def test_keys_ttl_forgets_old_records_of_agents_not_held(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            first = await store.save("ns/a", {"i": 1}, idempotency_key="k1")
            await store.save("ns/a", {"i": 2})
            await store.save("held/a", {"i": 1}, idempotency_key="k1")
            await store.save("ns/b", {"i": 1})
            now = time.time()
            # younger than the TTL: nothing to do
            assert (await apply_retention(store, POLICY, now=now + DAY)).actions == []
            # a dry run counts, forgets nothing
            seen: list[GovernanceEvent] = []
            report = await apply_retention(store, POLICY, now=now + 31 * DAY, dry_run=True)
            assert [(a.agent_id, a.kind, a.outcome, a.keys_expired) for a in report.actions] == [
                ("ns/a", "expire-keys", "dry-run", 1)
            ]
            assert report.held == 1
            assert (await store.save("ns/a", {"i": 1}, idempotency_key="k1")).duplicate
            # applied: forgotten, audited; the held agent keeps its record
            report = await apply_retention(store, POLICY, now=now + 31 * DAY, audit=seen.append)
            assert [(a.agent_id, a.kind, a.outcome, a.keys_expired) for a in report.actions] == [
                ("ns/a", "expire-keys", "done", 1)
            ]
            assert [(e.op, e.agent_id, e.outcome, e.details["keys_expired"]) for e in seen] == [
                ("expire-keys", "ns/a", "done", 1)
            ]
            assert await store.backend.lookup_key("ns/a", "k1") is None
            assert (await store.save("held/a", {"i": 1}, idempotency_key="k1")).duplicate
            # a retry older than keys_ttl is stored again, as a new append
            again = await store.save("ns/a", {"i": 3}, idempotency_key="k1")
            assert not again.duplicate and again.first_seq == 3 > first.first_seq
            assert (await store.load("ns/a")).data == {"i": 3}
            assert (await store.verify()).ok
            # the record made again is young: nothing to do
            assert (await apply_retention(store, POLICY, now=now + 29 * DAY)).actions == []


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_without_keys_ttl_every_record_stays(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("ns/a", {"i": 1}, idempotency_key="k1")
            policy = RetentionPolicy.parse("* keep_last=100 ttl=3650d\n")
            report = await apply_retention(store, policy, now=time.time() + 365 * DAY)
            assert report.actions == []
            assert (await store.save("ns/a", {"i": 1}, idempotency_key="k1")).duplicate


async def test_an_engine_that_cannot_expire_records_reports_it(tmp_path: Path) -> None:
    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("ns/a", {"i": 1}, idempotency_key="k1")
            report = await apply_retention(store, POLICY, now=time.time() + 31 * DAY)
            assert [(a.kind, a.outcome) for a in report.actions] == [("expire-keys", "unsupported")]
            assert (await store.save("ns/a", {"i": 1}, idempotency_key="k1")).duplicate


def test_the_policy_file_reads_keys_ttl() -> None:
    rule = RetentionPolicy.parse("acme keys_ttl=12h ttl=30d\n").rule_for("acme/x")
    assert rule is not None and rule.keys_ttl == 12 * 3600 and rule.ttl == 30 * DAY
    assert RetentionPolicy.parse("* keys_ttl=7d\n").rules[0].keys_ttl == 7 * DAY
    for bad in ("* keys_ttl=soon", "* keys_ttl=", "* keys_ttl=-1d", "* keys_ttl=1d keys_ttl=2d"):
        with pytest.raises(RetentionPolicyError) as info:
            RetentionPolicy.parse(bad + "\n", source="p.txt")
        assert info.value.line == 1 and "keys_ttl" in str(info.value)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql"])
async def test_keys_ttl_never_forgets_a_durable_steps_record(tmp_path: Path, engine: str) -> None:
    """A durable step's record is what makes it run once: keys_ttl forgot it with the
    other old records, and a retry of the step after the TTL ran its side effect again
    (a charge made twice, no error). Its record now stays as long as the agent; the
    agent's other old records are still forgotten."""
    charged: list[int] = []

    async def charge(amount: int) -> dict[str, int]:
        charged.append(amount)
        return {"charged": amount}

    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            steps = Steps(store, "ns/order")
            assert await steps.run("charge", charge, 30) == {"charged": 30}
            await store.save("ns/order", {"paid": True}, idempotency_key="k1")
            report = await apply_retention(store, POLICY, now=time.time() + 31 * DAY)
            assert [(a.agent_id, a.kind, a.keys_expired) for a in report.actions] == [
                ("ns/order", "expire-keys", 1)  # k1 alone
            ]
            assert await store.backend.lookup_key("ns/order", "k1") is None
            # the retry after the TTL (another process: nothing remembered) is a replay
            again = Steps(store, "ns/order")
            assert await again.run("charge", charge, 30) == {"charged": 30}
            assert charged == [30]
            assert await again.results() == {"charge": {"charged": 30}}
            # every later run finds nothing more to forget
            report = await apply_retention(store, POLICY, now=time.time() + 400 * DAY)
            assert report.actions == []
