"""An agent taken off the Redis agent index (``ZREM <prefix>agents <id>``) is in every
backup and export of the store (of its namespace), so a restore or an import keeps it.

Before, ``verify`` named such an agent (kind ``orphan``) but a backup and an export
read the listing alone and left it out without a word: restoring the backup lost it.
Now the engine names the agents it stores and its index does not list
(``Backend.unlisted_agents``) and both copy them with the listed ones (and log a
warning naming them); the restore lists them again. Plain and sharded."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import StateStore
from statekeeper.backends.redis.keys import Layout
from statekeeper.governance.backup import BackupKey, backup, restore

from ._services import REDIS_URL, fresh_url

pytest.importorskip("redis")


def _take_off_index(url: str, shards: int | None, agent_id: str) -> None:
    import redis

    prefix = parse_qs(urlsplit(url).query)["prefix"][0].encode()
    layout = Layout(prefix, shards)
    with redis.Redis.from_url(REDIS_URL) as client:
        assert client.zrem(layout.agent(agent_id).shard.index, agent_id.encode()) == 1


@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_backup_and_export_keep_an_agent_off_the_index(
    tmp_path: Path, shards: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    from statekeeper.cli.transfer import export_agents, import_agents

    with fresh_url("redis", tmp_path) as url:
        if shards is not None:
            url += f"&shards={shards}"
        async with StateStore(url) as store:
            for agent in ("acme/alpha", "acme/beta", "other/gamma"):
                for i in range(3):
                    await store.save(agent, {"n": i})
        _take_off_index(url, shards, "acme/beta")
        key = BackupKey(os.urandom(32))
        async with StateStore(url) as store:
            assert [a.agent_id for a in await store.list_agents()] == ["acme/alpha", "other/gamma"]
            with caplog.at_level(logging.WARNING):
                whole = await backup(store, tmp_path / "whole.skb", key)
            assert whole.agents == 3  # (2 before: acme/beta left out)
            assert "acme/beta" in caplog.text and "index does not list" in caplog.text
            caplog.clear()
            out = io.BytesIO()
            with caplog.at_level(logging.WARNING):
                agents, events, _ = await export_agents(store, None, out)
            assert (agents, events) == (3, 9)
            assert "exporting 1 agent(s) the agent index does not list" in caplog.text
        async with StateStore(url, namespace="acme") as acme:
            part = await backup(acme, tmp_path / "acme.skb", key)
            assert part.agents == 2
            scoped = io.BytesIO()
            assert (await export_agents(acme, None, scoped))[:2] == (2, 6)
        target = f"sqlite:///{tmp_path / 'r.db'}"
        async with StateStore(target) as restored:
            await restore(restored, [tmp_path / "whole.skb"], key)
            assert [a.agent_id for a in await restored.list_agents()] == [
                "acme/alpha",
                "acme/beta",
                "other/gamma",
            ]
            assert (await restored.load("acme/beta")).data == {"n": 2}
        imported = f"sqlite:///{tmp_path / 'i.db'}"
        async with StateStore(imported):
            pass  # (an import goes into an existing store)
        assert (await import_agents(imported, io.BytesIO(out.getvalue())))[:2] == (3, 9)
        async with StateStore(imported) as again:
            assert (await again.load("acme/beta")).data == {"n": 2}
