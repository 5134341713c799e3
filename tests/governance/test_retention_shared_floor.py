"""The change feed is shared by every tenant: a tenant's administrator's retention run
removes its own namespace's events but does not trim the feed (raise its floor).

Before, ``apply_retention`` opened as ``acme-admin`` (``admin`` on ``acme/**`` only)
trimmed the store-wide feed through the last ``acme`` event it removed: ``globex``'s
subscriber, behind that position, got ``FeedPositionCompacted`` for a feed whose
``globex`` events were all still there and had to rebuild its read model — a tenant
changing what another tenant's consumers can read. ``trim_feed`` itself needs ``admin``
on ``**``, and PostgreSQL row security (``enforce_in_postgres``) refuses the tenant's
role the same trim; retention now keeps that rule in the process too, and says so in
each action's reason (as it does under row security).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

POLICY = parse_policy(
    """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.globex-app]
write = ["globex/**"]

[principals.ops]
admin = ["**"]
"""
)


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as found:
        yield found


async def _seed(whole: StateStore) -> None:
    await whole.save("globex/g1", {"n": 1})  # position 1: globex's, behind everything
    for i in range(3):
        await whole.save("acme/a1", {"n": i})
    await whole.save("acme/old", {"n": 0})
    await whole.save("globex/g1", {"n": 2})


def _as(whole: StateStore, principal: str) -> StateStore:
    return StateStore(whole.backend, principal=principal, policy=POLICY)


async def _globex_reads_from_the_start(whole: StateStore) -> list[tuple[str, int]]:
    globex = _as(whole, "globex-app")
    return [(c.agent_id, c.event.seq) async for c in globex.subscribe(stop_at_head=True)]


@pytest.mark.parametrize("rule", ["acme keep_last=1", "acme ttl=1s"])
async def test_a_tenant_admins_retention_leaves_the_shared_feed_alone(url: str, rule: str) -> None:
    async with StateStore(url) as whole:
        await _seed(whole)
        floor_before = (await whole.feed_cursor_bounds()).floor
        acme = _as(whole, "acme-admin")
        report = await apply_retention(acme, RetentionPolicy.parse(rule), now=whole.clock() + 3600)
        assert {a.agent_id for a in report.actions} >= {"acme/a1"}
        assert all(a.outcome == "done" for a in report.actions), report.actions
        # its own events are gone ...
        if "keep_last" in rule:
            assert [e.seq async for e in whole.history("acme/a1", after_seq=2)] == [3]
        else:
            assert await whole.head("acme/a1") == 0
        # ... the feed every tenant shares is not trimmed, and the report says so
        assert (await whole.feed_cursor_bounds()).floor == floor_before
        assert report.feed_through is None
        assert all(a.feed_position == 0 for a in report.actions)
        assert all("floor not raised" in a.reason for a in report.actions), report.actions
        # globex's subscriber behind it still reads its own events from the start
        assert await _globex_reads_from_the_start(whole) == [("globex/g1", 1), ("globex/g1", 2)]


async def test_a_dry_run_of_a_tenant_admin_predicts_no_floor(url: str) -> None:
    async with StateStore(url) as whole:
        await _seed(whole)
        acme = _as(whole, "acme-admin")
        report = await apply_retention(
            acme, RetentionPolicy.parse("acme keep_last=1"), dry_run=True
        )
        assert [a.outcome for a in report.actions] == ["dry-run"]
        assert report.feed_through is None and report.actions[0].feed_position == 0


@pytest.mark.parametrize("principal", ["ops", None])
async def test_an_admin_of_every_namespace_still_raises_the_floor(
    url: str, principal: str | None
) -> None:
    async with StateStore(url) as whole:
        await _seed(whole)
        store = whole if principal is None else _as(whole, principal)
        report = await apply_retention(store, RetentionPolicy.parse("acme keep_last=1"))
        assert report.feed_through is not None
        assert report.actions[0].feed_position > 0
        assert "floor" not in report.actions[0].reason
        floor = (await whole.feed_cursor_bounds()).floor
        assert max(floor.positions) == report.actions[0].feed_position
