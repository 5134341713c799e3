"""A namespace's backup carries the legal holds on that namespace (in its manifest),
and a restore places them before it writes any agent.

The holds are one stream of the store's own for the whole store, which a tenant's
backup does not copy: before, a namespace's backup held none of them, and its restore
delivered every held agent unheld (``delete``, ``forget``, retention could then
destroy it), with nothing said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentOnHold
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.holds import add_hold, list_holds

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["sqlite", "redis", "postgresql"])
async def test_a_namespace_backup_restores_its_holds(engine: str, tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for agent in ("acme/alice", "acme/bob", "acme/eu/carol", "beta/dan"):
                await store.save(agent, {"email": f"{agent}@example.com"})
            await add_hold(store, "acme/alice", "Smith v. Acme")
            await add_hold(store, "acme/eu/*", "EU inquiry")
            await add_hold(store, "beta/dan", "another tenant's matter")
            async with StateStore(url, namespace="acme") as tenant:
                await backup(tenant, tmp_path / "acme.skb", key)
                await tenant.save("bob", {"email": "new"})
                await backup(tenant, tmp_path / "inc.skb", key, since=tmp_path / "acme.skb")
    chain = [tmp_path / "acme.skb", tmp_path / "inc.skb"]
    for name, namespace in (("whole.db", None), ("tenant.db", "acme")):
        target = f"sqlite:///{tmp_path / name}"
        async with StateStore(target) as fresh:
            await fresh.save("other/x", {"n": 1})  # (a store, not empty)
        async with StateStore(target, namespace=namespace) as into:
            result = await restore(into, chain, key)
            assert sorted(result.holds_placed) == ["acme/alice", "acme/eu/*"]
        async with StateStore(target) as restored:
            held = {h.pattern: h.reason for h in await list_holds(restored)}
            assert held == {"acme/alice": "Smith v. Acme", "acme/eu/*": "EU inquiry"}
            for agent in ("acme/alice", "acme/eu/carol"):
                with pytest.raises(AgentOnHold):
                    await restored.delete(agent)
            assert await restored.delete("acme/bob")  # not held
