"""A tenant admin's restore and the feed id every tenant's cursors name. A restore
renewed the store's feed id whoever ran it: the restore of ``acme``'s agents by
``acme``'s admin made every other tenant's cursors and projection positions raise
``FeedChanged`` (and, since a live subscription checks the id with each page, stopped
their live subscriptions too) — every tenant made to rebuild its read models, though
the restore numbered none of their events anew: the restored agents enter the feed as
new positions after every cursor. Only a principal that may act on the feed every
tenant shares (a store opened without a principal, or an admin of every namespace)
renews it now, as only such a one raises its floor; a tenant admin's restore leaves
it, and says so."""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError, FeedChanged
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS
from statekeeper.governance import parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.restoreholds import holds_of

from ..backends._services import fresh_url
from ._shared import backup_of

POLICY = parse_policy(
    """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


ACME_X = "acme/x"


async def _acme_backup(tmp_path: Path) -> tuple[Path, BackupKey]:
    return await backup_of(tmp_path, "acme/", 4)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_tenant_admins_restore_leaves_other_tenants_cursors_valid(
    tmp_path: Path, engine: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, key = await _acme_backup(tmp_path)
    (tmp_path / "dst").mkdir()
    with fresh_url(engine, tmp_path / "dst") as url:
        async with StateStore(url) as whole:
            await whole.save("globex/g", {"n": 0})
            feed = await whole.backend.feed_id()
            globex = whole.subscribe(namespace="globex")
            assert (await anext(globex)).agent_id == "globex/g"
            saved = str(globex.cursor)  # what globex's consumer keeps
            acme = StateStore(whole.backend, principal="acme-admin", policy=POLICY)
            with caplog.at_level(logging.WARNING, logger="statekeeper.restore"):
                result = await restore(acme, [path], key)
            assert result.agents == 2
            # was: renewed — globex's cursor refused, its live subscription stopped
            assert await whole.backend.feed_id() == feed
            await whole.save("globex/g", {"n": 1})
            assert [(c.agent_id, c.seq) for c in await globex.next_batch(10)] == [("globex/g", 2)]
            resumed = whole.subscribe(saved, namespace="globex", stop_at_head=True)
            assert [(c.agent_id, c.seq) async for c in resumed] == [("globex/g", 2)]
            said = [r.getMessage() for r in caplog.records if "not renewed" in r.getMessage()]
            assert len(said) == 1 and "acme" in said[0]
            # the restored agents are in the feed, after every cursor taken before
            # (each after a tombstone of it: see the test below)
            everything = [(c.agent_id, c.seq) async for c in whole.subscribe(stop_at_head=True)]
            assert sorted(everything) == [
                ("acme/a0", 0),
                ("acme/a0", 1),
                ("acme/a0", 2),
                ("acme/a1", 0),
                ("acme/a1", 1),
                ("acme/a1", 2),
                ("globex/g", 1),
                ("globex/g", 2),
            ]


async def test_a_store_admins_restore_still_renews_it(tmp_path: Path) -> None:
    path, key = await _acme_backup(tmp_path)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as whole:
        await whole.save("globex/g", {"n": 0})
        globex = whole.subscribe(namespace="globex")
        await anext(globex)
        saved = str(globex.cursor)
        ops = StateStore(whole.backend, principal="ops", policy=POLICY)
        await restore(ops, [path], key)
        with pytest.raises(FeedChanged):
            await anext(whole.subscribe(saved, namespace="globex", stop_at_head=True))
        await whole.save("globex/g", {"n": 1})
        with pytest.raises(FeedChanged):
            await anext(globex)


async def test_a_tenant_admins_restore_of_an_expired_agent_is_not_applied_twice(
    tmp_path: Path,
) -> None:
    """An agent that expired (``ttl``) left no tombstone: its subscribers still hold
    what they derived from its events. A tenant admin's restore renews no id, so the
    restored events come as new appends — each restored agent is announced first with
    a tombstone (was: a read model applied the same events a second time, no error;
    a store admin's restore renews the id: ``FeedChanged``, rebuild)."""
    key = BackupKey(os.urandom(32))
    (tmp_path / "dst").mkdir()
    with fresh_url("redis", tmp_path / "dst") as url:
        prefix = parse_qs(urlparse(url).query)["prefix"][0]
        async with StateStore(url + "&ttl=3600") as whole:
            for n in range(3):
                await whole.save("acme/x", {"n": n})
            await whole.save("globex/g", {"n": 0})
            await backup(StateStore(whole.backend, namespace="acme"), tmp_path / "acme.skb", key)
            models = tmp_path / "models.db"
            query = "SELECT agent_id, events FROM agent_activity ORDER BY agent_id"
            async with ProjectionRunner(whole, models, [BUILTINS["agent_activity"]()]) as runner:
                await runner.catch_up()
                assert await runner.query(query) == [("acme/x", 3), ("globex/g", 1)]
                # acme/x expires (as its ttl would): no tombstone
                client = whole.backend._client  # type: ignore[attr-defined]
                keys = [k async for k in client.scan_iter(match=f"{prefix}*acme/x*")]
                assert keys
                for k in keys:
                    await client.pexpire(k, 1)
                while await client.exists(*keys):  # (EXISTS expires a key past its time)
                    pass
                assert await whole.head("acme/x") == 0
                acme = StateStore(whole.backend, principal="acme-admin", policy=POLICY)
                assert (await restore(acme, [tmp_path / "acme.skb"], key)).agents == 1
                await runner.catch_up()
                # was: ("acme/x", 6)
                assert await runner.query(query) == [("acme/x", 3), ("globex/g", 1)]
            sub = whole.subscribe(namespace="acme", stop_at_head=True)
            got = [(c.agent_id, c.seq, c.deleted) async for c in sub]
            # (the expired events are gaps now): the tombstone, then the restored events
            assert got == [(ACME_X, 0, True)] + [(ACME_X, s, False) for s in (1, 2, 3)]


async def test_an_agent_made_during_a_tenant_admins_restore_keeps_its_read_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates an agent of the backup after the restore found the
    target without it and before its tombstone: the restore is refused, and no
    tombstone of the agent is written (was: written, so a read model dropped the
    agent, which the store still holds with its events; no error said so)."""
    path, key = await _acme_backup(tmp_path)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as whole:
        await whole.save("globex/g", {"n": 0})

        async def meanwhile(*args: Any, **kwargs: Any) -> Any:
            await whole.save("acme/a0", {"mine": 1})  # (another process, in between)
            await whole.save("acme/a0", {"mine": 2})
            return await holds_of(*args, **kwargs)

        module = importlib.import_module("statekeeper.governance.backup.restore")
        monkeypatch.setattr(module, "holds_of", meanwhile)
        query = "SELECT agent_id, events FROM agent_activity ORDER BY agent_id"
        models = tmp_path / "models.db"
        async with ProjectionRunner(whole, models, [BUILTINS["agent_activity"]()]) as runner:
            acme = StateStore(whole.backend, principal="acme-admin", policy=POLICY)
            with pytest.raises(ConflictError):
                await restore(acme, [path], key)
            await runner.catch_up()
            assert await whole.head("acme/a0") == 2
            # was: [("globex/g", 1)]
            assert await runner.query(query) == [("acme/a0", 2), ("globex/g", 1)]
