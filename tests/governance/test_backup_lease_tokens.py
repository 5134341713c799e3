"""A backup carries each agent's newest fencing token, and a restore raises the
target's tokens to them before it writes the agents (docs/concurrency.md, section 2).

Before, lease rows were in no backup: after a restore every agent's tokens started at
1 again, so a worker paused under (holder "w1", token 1) before the restore, resuming
after a new "w1" (a reused pod name) took the restored agent at token 1, wrote under
that lease — the fencing promise broken with nothing said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import LeaseLost
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url

ENGINES = ["memory", "sqlite", "postgresql", "redis"]


async def _leased(store: StateStore, agent: str, grants: int) -> object:
    """``grants`` leases of ``agent`` to "w1", each writing; the last one still held."""
    lease = None
    for n in range(grants):
        lease = await LeaseManager(store, holder="w1").acquire(agent, ttl=300)
        await store.save(agent, {"n": n}, lease=lease)
    return lease


async def _check_fenced(into: StateStore, agent: str, stale: object, newest: int) -> None:
    carried = await into.backend.get_lease(agent)
    assert carried is not None and (carried.holder, carried.token) == (None, newest)
    fresh = await LeaseManager(into, holder="w1").acquire(agent, ttl=300)
    assert fresh.token == newest + 1
    with pytest.raises(LeaseLost):  # the paused worker's write is refused
        await into.save(agent, {"n": "stale"}, lease=stale)
    await into.save(agent, {"n": "fresh"}, lease=fresh)


@pytest.mark.parametrize("target", ENGINES)
@pytest.mark.parametrize("source", ENGINES)
async def test_a_restore_hands_out_tokens_above_the_sources(
    source: str, target: str, tmp_path: Path
) -> None:
    key = BackupKey(os.urandom(32))
    (tmp_path / "s").mkdir()
    (tmp_path / "t").mkdir()
    with fresh_url(source, tmp_path / "s") as url, fresh_url(target, tmp_path / "t") as into_url:
        async with StateStore(url) as store:
            stale = await _leased(store, "a", 3)
            await (await _leased(store, "b", 1)).release()  # type: ignore[attr-defined]
            await store.save("c", {"n": 0})  # never leased
            await backup(store, tmp_path / "full.skb", key)
            stale_d = await _leased(store, "a", 2)  # after the full backup: tokens 4, 5
            await store.save("d", {"n": 0})
            await _leased(store, "d", 2)
            await backup(store, tmp_path / "inc.skb", key, since=tmp_path / "full.skb")
        async with StateStore(into_url) as into:
            await restore(into, [tmp_path / "full.skb"], key)
            await _check_fenced(into, "a", stale, 3)
            assert (await LeaseManager(into, holder="x").acquire("b", ttl=300)).token == 2
            assert (await LeaseManager(into, holder="x").acquire("c", ttl=300)).token == 1
        if target == "memory" or source == "memory":
            return  # (the incremental restore below: into a second fresh store)
    (tmp_path / "u").mkdir()
    with fresh_url(target, tmp_path / "u") as chain_url:
        async with StateStore(chain_url) as into:
            await restore(into, [tmp_path / "full.skb", tmp_path / "inc.skb"], key)
            await _check_fenced(into, "a", stale_d, 5)
            assert (await into.backend.get_lease("d")).token == 2  # type: ignore[union-attr]


async def test_a_namespace_backup_carries_its_own_tokens_only(tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as store:
        await _leased(store, "acme/a", 2)
        await _leased(store, "beta/b", 4)
        async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", namespace="acme") as tenant:
            await backup(tenant, tmp_path / "acme.skb", key)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as into:
        await restore(into, [tmp_path / "acme.skb"], key)
        assert (await into.backend.get_lease("acme/a")).token == 2  # type: ignore[union-attr]
        assert await into.backend.get_lease("beta/b") is None


async def test_a_restore_never_lowers_a_token_and_skips_what_it_skips(tmp_path: Path) -> None:
    """--skip-existing: an agent the target keeps keeps its own lease; a token the
    target already passed stays."""
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as store:
        await _leased(store, "a", 2)
        await _leased(store, "b", 3)
        await backup(store, tmp_path / "full.skb", key)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as into:
        kept = await _leased(into, "b", 1)  # the target's own "b", held
        await into.backend.carry_lease_tokens([("a", 7)])  # a token beyond the backup's
        result = await restore(into, [tmp_path / "full.skb"], key, skip_existing=True)
        assert result.skipped == 1
        assert (await into.backend.get_lease("a")).token == 7  # type: ignore[union-attr]
        await into.save("b", {"n": "still mine"}, lease=kept)  # not revoked
