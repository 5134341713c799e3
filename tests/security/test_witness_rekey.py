"""The automatic witness keeps checking a stream in full after a key rotation: rekey
makes the marks written under the old key again under the active one (once they are
checked with the old key), so retiring the old key does not quietly reduce the check
of those streams to their seq (a store rolled back and written again past the mark
would then pass)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from statekeeper import Keyring, StateStore, SyncStateStore
from statekeeper.security import generate_key, rekey

K1, K2 = generate_key(), generate_key()


def _rekey(url: str, keyring: Keyring) -> None:
    async def go() -> None:
        async with StateStore(url, keyring=keyring) as store:
            await rekey(store)

    asyncio.run(go())


def test_a_rollback_past_a_mark_made_under_a_retired_key_is_still_found(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    url = f"sqlite:///{db}"
    both = Keyring({"k1": K1, "k2": K2}, active="k2")
    with SyncStateStore(url, keyring=both, witness=False) as store:
        store.save("a", {"n": 1})
        store.save("a", {"n": 2})
    shutil.copy(db, tmp_path / "old.db")  # a copy of the store at seq 2 (under k2)
    # a process not yet rotated acknowledges seq 3 under k1: the witness marks it so
    with SyncStateStore(url, keyring=Keyring({"k1": K1, "k2": K2}, active="k1")) as store:
        store.save("a", {"n": 3})
    _rekey(url, both)  # the rotation finished: every record under k2
    only_k2 = Keyring({"k2": K2})  # ... and k1 retired
    with SyncStateStore(url, keyring=only_k2) as store:
        assert store.verify().ok
    # the old copy restored, and written again past the mark by a writer without one
    shutil.copy(tmp_path / "old.db", db)
    with SyncStateStore(url, keyring=only_k2, witness=False) as store:
        store.save("a", {"n": 999})
    with SyncStateStore(url, keyring=only_k2) as store:
        report = store.verify()
    assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [("a", 3, "rollback")]
    assert "is not the one acknowledged" in report.problems[0].reason
