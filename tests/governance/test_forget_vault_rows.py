"""``forget`` does not leave a key vault row behind for its hidden intent stream.

Each ``forget`` writes a feed intent (``"\\x01sk-feed/pending/<token>"``, see
``statekeeper.store.feed_intents``) and deletes it once the tombstone is stored. The
intent was sealed with a data key of its own, created in the vault and never
destroyed: the vault grew one live key per forget (and per delete on an engine that
writes intents), for streams that no longer exist. Intents are now sealed with the
master key (they hold an agent id, a head and a checksum: no data of the agent).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.governance.shredding import forget
from statekeeper.store import feed_intents


def _rows(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return sorted(
            str(r[0])
            for r in db.execute(
                "SELECT agent_id FROM data_keys UNION ALL SELECT agent_id FROM family_data_keys"
            )
        )
    finally:
        db.close()


async def test_the_vault_holds_one_row_per_agent_not_per_forget(tmp_path: Path) -> None:
    vault_file = tmp_path / "vault.db"
    ring = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(vault_file))
    agents = [f"acme/a{i}" for i in range(6)]
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=ring) as store:
        for agent in agents:
            await store.save(agent, {"email": f"{agent}@example.com"})
        for agent in agents:
            assert (await forget(store, agent)).destroyed
        assert not await store.feed_intents()
        for agent in agents[:2]:  # the store works on: its feed, the other agents
            await store.save(agent.replace("/a", "/b"), {"n": 1})
    rows = _rows(vault_file)
    left = [r for r in rows if r.startswith(feed_intents.PENDING)]
    assert left == [], f"{len(left)} vault rows for intent streams that are gone"
    assert set(agents) <= set(rows)
