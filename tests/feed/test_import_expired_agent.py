"""``statekeeper import`` keeps the target's feed id (it writes only agents the target
does not hold, as new positions after every cursor) — but an agent that expired
(``ttl``) left no tombstone, and its subscribers still held what they derived from
its events: importing its export again made a read model apply the same events a
second time, no error. Each agent the import writes anew now comes after a tombstone
of it (as a tenant admin's restore: tests/feed/test_tenant_restore_feed_id.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from statekeeper import StateStore
from statekeeper.cli.export_holds import place_holds
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.errors import ConflictError
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS

from ..backends._services import fresh_url

QUERY = "SELECT agent_id, events FROM agent_activity ORDER BY agent_id"


async def test_an_import_of_an_expired_agent_is_not_applied_twice(tmp_path: Path) -> None:
    with fresh_url("redis", tmp_path) as url:
        prefix = parse_qs(urlparse(url).query)["prefix"][0]
        async with StateStore(url + "&ttl=3600") as store:
            for n in range(3):
                await store.save("x", {"n": n})
            await store.save("y", {"n": 0})
            out = io.BytesIO()
            await export_agents(store, ["x"], out)
            async with ProjectionRunner(
                store, tmp_path / "models.db", [BUILTINS["agent_activity"]()]
            ) as runner:
                await runner.catch_up()
                assert await runner.query(QUERY) == [("x", 3), ("y", 1)]
                client = store.backend._client  # type: ignore[attr-defined]
                keys = [k async for k in client.scan_iter(match=f"{prefix}*:x")]
                assert keys
                for k in keys:  # x expires (as its ttl would): no tombstone
                    await client.pexpire(k, 1)
                while await client.exists(*keys):  # (EXISTS expires a key past its time)
                    pass
                assert await store.head("x") == 0
                feed = await store.backend.feed_id()
                agents, _, _ = await import_agents(url, io.BytesIO(out.getvalue()))
                assert agents == 1
                assert await store.backend.feed_id() == feed  # kept: every cursor valid
                await runner.catch_up()
                assert await runner.query(QUERY) == [("x", 3), ("y", 1)]  # was: ("x", 6)


async def test_an_agent_made_meanwhile_keeps_its_read_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates an agent of the file after the import found it absent
    and before its tombstone: the import is refused (the agent exists), and the
    tombstone is not written — was: written anyway, so a read model dropped the
    agent, which is still stored with its events (no error said so)."""
    url = f"sqlite:///{tmp_path / 'target.db'}"
    async with StateStore(f"sqlite:///{tmp_path / 'source.db'}") as source:
        await source.save("x", {"n": 1})
        out = io.BytesIO()
        await export_agents(source, ["x"], out)
    async with StateStore(url) as store:
        await store.save("y", {"n": 0})

        async def meanwhile(*args: Any, **kwargs: Any) -> Any:
            await store.save("x", {"mine": 1})  # (another process, between the checks)
            await store.save("x", {"mine": 2})
            return await place_holds(*args, **kwargs)

        monkeypatch.setattr("statekeeper.cli.transfer.place_holds", meanwhile)
        async with ProjectionRunner(
            store, tmp_path / "models.db", [BUILTINS["agent_activity"]()]
        ) as runner:
            with pytest.raises(ConflictError):
                await import_agents(url, io.BytesIO(out.getvalue()))
            await runner.catch_up()
            assert await store.head("x") == 2
            assert await runner.query(QUERY) == [("x", 2), ("y", 1)]  # was: [("y", 1)]
