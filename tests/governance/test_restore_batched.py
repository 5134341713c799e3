"""The restore's writing pass commits a batch of agents at once (one engine batch per
round of writes), not one commit per agent: on SQLite, 100,000 agents took ~100,000
commits through the event loop and the writer thread (~2/3 of the restore's CPU,
docs/benchmarks.md "backup16"). What it writes is the same: every agent whole,
verified, its idempotency keys and head tag kept."""

from __future__ import annotations

import os
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, backup, restore

KEYS = Keyring({"k1": bytes(range(32))})


async def test_a_restore_commits_its_agents_in_batches(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    agents = 300
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=KEYS) as src:
        for i in range(agents):
            await src.save(f"t/a{i:03d}", {"i": i})
            # a keyed save: the part is written in two appends (cut at the key)
            await src.save(f"t/a{i:03d}", {"i": i, "more": True}, idempotency_key=f"k{i}")
        await backup(src, file, bkey)
        tags = {f"t/a{i:03d}": await src.backend.head_tag(f"t/a{i:03d}") for i in range(agents)}
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=KEYS) as dst:
        before = dst.backend.append_commits  # type: ignore[attr-defined]
        result = await restore(dst, [file], bkey)
        commits = dst.backend.append_commits - before  # type: ignore[attr-defined]
        assert result.agents == agents
        assert (await dst.verify()).ok
        # a batch per chunk and round (two rounds: before the key, from it): a handful,
        # not one or more per agent
        assert commits <= 10, commits
        for agent_id, tag in tags.items():
            assert await dst.backend.head_tag(agent_id) == tag
        assert (await dst.load("t/a007")).data == {"i": 7, "more": True}
        again = await dst.save("t/a007", {"x": 1}, idempotency_key="k7")
        assert again.duplicate  # the idempotency key came with it
