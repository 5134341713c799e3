"""``statekeeper retention apply`` skipped a Redis agent taken off its agent index
(backup and export include such agents since ``Backend.unlisted_agents``): a TTL or
``keep_last`` rule never applied to it, and its data outlived the policy. Retention
now covers the unlisted agents too, in id order with the listed ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ._services import fresh_url
from .test_redis_unlisted_backup import _take_off_index

pytest.importorskip("redis")


@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_retention_applies_to_an_agent_off_the_index(
    tmp_path: Path, shards: int | None
) -> None:
    with fresh_url("redis", tmp_path) as url:
        if shards is not None:
            url += f"&shards={shards}"
        async with StateStore(url, snapshot_every=2) as store:
            for agent in ("acme/alpha", "acme/beta", "old/gamma"):
                for i in range(6):
                    await store.save(agent, {"n": i})
        _take_off_index(url, shards, "acme/beta")
        _take_off_index(url, shards, "old/gamma")
        policy = RetentionPolicy.parse("acme keep_last=2\nold ttl=1h\n")
        async with StateStore(url) as store:
            report = await apply_retention(store, policy, now=10**12)
            done = [(a.agent_id, a.kind, a.outcome, a.events_removed) for a in report.actions]
            assert done == [
                ("acme/alpha", "compact", "done", 4),
                ("acme/beta", "compact", "done", 4),
                ("old/gamma", "purge", "done", 6),
            ], report.actions
            assert report.scanned == 3
            assert await store.head("old/gamma") == 0
            assert (await store.load("acme/beta")).data == {"n": 5}
