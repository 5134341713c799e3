"""A worker polling for a lease another holder has costs the audit log one entry per
refused call (outcome ``error:LeaseHeld``), not an announce and its void; the lease it
finally takes is recorded in the grant's own commit (memory, SQLite: ``append_together``)
or before it is taken (Redis: the entry first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Capability
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import LeaseHeld
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.records import LeaseInfo

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = parse_policy('[principals.app]\nwrite = ["acme/**"]\n')
POLLS = 12


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


async def test_refused_polls_cost_one_entry_each(url: str) -> None:
    async with StateStore(
        url, keyring=KEYRING, principal="app", policy=POLICY, audit=Audit(), witness=False
    ) as store:
        log = AuditLog(store.backend, KEYRING)
        owner = await LeaseManager(store, holder="owner", ttl=300).acquire("acme/t1")
        poller = LeaseManager(store, holder="poller", ttl=300)
        before = len([e async for e in log.entries()])
        for _ in range(POLLS):
            assert await poller.try_acquire("acme/t1") is None
        with pytest.raises(LeaseHeld):  # polls many times inside: still one entry
            await poller.acquire("acme/t1", wait=0.05, poll=0.005)
        added = [e async for e in log.entries()][before:]
        assert len(added) == POLLS + 1, [(e.operation, e.outcome, e.detail) for e in added]
        assert {(e.operation, e.outcome, e.agent_id) for e in added} == {
            ("lease", "error:LeaseHeld", "acme/t1")
        }
        assert all("voids" not in e.detail and "ahead" not in e.detail for e in added)

        # released: the next poll takes it, recorded with it (one entry, outcome ok):
        # in the grant's commit where the engine has one, else ahead of it
        await owner.release()
        lease = await poller.try_acquire("acme/t1")
        assert lease is not None
        last = [e async for e in log.entries()][-1]
        assert (last.operation, last.outcome, last.detail.get("holder")) == (
            "lease",
            "ok",
            "poller",
        )
        assert last.detail.get("token") == lease.token
        assert last.detail.get("ahead") is (
            None if store.backend.changes_leases_and_rewrites else True
        )
        report = await log.verify()
        assert report.ok and report.unapplied == [], (report.problems, report.unapplied)


async def test_a_lost_race_between_the_look_and_the_grant_is_announced_then_voided(
    url: str,
) -> None:
    """The lease looked free, then another holder took it before this one's attempt.
    Entry first (Redis): the attempt was announced, so it is voided: two entries. In one
    commit with the grant (memory, SQLite): the grant of the token the entry names is
    refused, nothing written, the next look sees the lease held: one refusal entry.
    The log is clean either way."""
    async with StateStore(
        url, keyring=KEYRING, principal="app", policy=POLICY, audit=Audit(), witness=False
    ) as store:
        backend = store.backend
        log = AuditLog(backend, KEYRING)
        look = backend.get_lease

        async def look_then_lose(agent_id: str) -> LeaseInfo | None:
            seen = await look(agent_id)
            await backend.acquire_lease(agent_id, "rival", 300)  # takes it right after
            return seen

        backend.get_lease = look_then_lose  # type: ignore[method-assign]
        before = len([e async for e in log.entries()])
        assert await LeaseManager(store, holder="poller").try_acquire("acme/t2") is None
        backend.get_lease = look  # type: ignore[method-assign]
        added = [e async for e in log.entries()][before:]
        if backend.changes_leases_and_rewrites:
            assert [(e.operation, e.outcome) for e in added] == [("lease", "error:LeaseHeld")]
            assert "voids" not in added[0].detail and "ahead" not in added[0].detail
        else:
            assert [(e.operation, e.outcome) for e in added] == [
                ("lease", "ok"),
                ("lease", "error:LeaseHeld"),
            ]
            assert added[0].detail.get("ahead") is True
            assert added[1].detail["voids"] == added[0].seq
        report = await log.verify()
        assert report.unapplied == [], report.unapplied
        if backend.supports(Capability.LEASE_LIST):
            # the rival took its lease on the engine itself, past the log: seen
            assert len(report.problems) == 1 and "holder 'rival'" in report.problems[0]
            assert "granted without the audit log" in report.problems[0]
        else:
            assert report.ok, report.problems
