"""Key rotation covers the change feed's tombstones: a delete's tombstone sealed under
the old key is re-encrypted by ``rekey`` and counted by ``keys status``.

Before, both passed it by (it is a stream of statekeeper's own, not an agent): after
the documented rotation (a new key, ``rekey``, ``keys status`` naming no old key, the
old key removed) every subscriber reading from the start, and a restore of any backup
taken since, failed with ``KeyNotFound`` on the first tombstone."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.security import Keyring, generate_key, key_usage, rekey

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
NEW = Keyring({"k2": K2})


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
async def test_rotation_reencrypts_the_feeds_tombstones(tmp_path: Path, engine: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if engine == "sqlite" else "memory://"
    async with StateStore(url, keyring=OLD) as store:
        await store.save("gone", {"secret": "s"})
        await store.save("kept", {"n": 1})
        assert await store.delete("gone")  # its tombstone: sealed under k1

        rotating = StateStore(store.backend, keyring=BOTH)
        await rekey(rotating)
        usage = await key_usage(rotating)
        assert "k1" not in usage, usage  # keys status: k1 may be retired

        after = StateStore(store.backend, keyring=NEW)  # k1 retired
        # (this raised KeyNotFound: the tombstone was still under k1)
        seen = [(e.agent_id, e.deleted) async for e in after.subscribe(0, stop_at_head=True)]
        assert seen == [("kept", False), ("gone", True)]
        await after.delete("kept")  # the next tombstone chains onto the re-encrypted one
        seen = [(e.agent_id, e.deleted) async for e in after.subscribe(0, stop_at_head=True)]
        assert seen == [("gone", True), ("kept", True)]
