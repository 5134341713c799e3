"""A rekey planned before a retention prune of the same agent, committed after it.

``rekey_agent`` reads the agent's snapshots, walks (and rewrites, a batch at a time)
its events, then commits the last of them with the re-sealed snapshots. A retention
``keep_last`` landing between the walk and that commit removes the events and the
snapshots below its base; the rewrite's compare-and-set does not see it (a prune keeps
the head). Every engine wrote the rewrite's snapshots back unchecked: the snapshot the
prune removed was readable again, and the rekey reported success. Now the engine
refuses the rewrite (ConfigurationError naming the agent and the seq, nothing of it
written, as for an event below the base), the rekey stops with it, and the pruned
snapshot stays gone; the rekey run again after the prune completes."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import ConfigurationError, StateStore
from statekeeper.codec import Codec
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy, Rule
from statekeeper.records import RawSnapshot, RewriteRequest
from statekeeper.security import Keyring, generate_key, rekey_agent

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")


async def test_a_rekey_planned_before_a_prune_never_writes_a_pruned_snapshot_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        for i in range(10):
            await store.save("a", {"n": i})
        assert [s.seq for s in await _snapshots(store)] == [3, 6, 9]
    async with StateStore(url, keyring=BOTH) as rekeying, StateStore(url, keyring=BOTH) as other:
        real = rekeying.backend.rewrite
        pruned = False

        async def rewrite(request: RewriteRequest) -> Any:
            # the retention run lands between rekey's walk and its commit of the snapshots
            nonlocal pruned
            if request.snapshots and not pruned:
                pruned = True
                await apply_retention(other, RetentionPolicy(rules=(Rule("*", keep_last=4),)))
                assert [s.seq for s in await _snapshots(other)] == [6, 9]
            return await real(request)

        rekeying.backend.rewrite = rewrite  # type: ignore[method-assign]
        with pytest.raises(ConfigurationError, match=r"'a'.* seq 3\b"):
            await rekey_agent(rekeying, "a", batch=2)
        assert pruned
        # the pruned snapshot is not stored again; the stream reads as retention left it
        assert [s.seq for s in await _snapshots(other)] == [6, 9]
        assert await other.backend.latest_snapshot("a", 5) is None
        assert (await other.load("a")).data == {"n": 9}
        # planned again (after the prune), the rekey completes
        rekeying.backend.rewrite = real  # type: ignore[method-assign]
        await rekey_agent(rekeying, "a", batch=2)
        assert (await other.load("a")).data == {"n": 9}
        assert [s.seq for s in await _snapshots(other)] == [6, 9]
    with closing(sqlite3.connect(tmp_path / "a.db")) as conn:
        rows = list(conn.execute("SELECT 'e', seq, payload FROM sk_events"))
        rows += conn.execute("SELECT 's', seq, payload FROM sk_snapshots")
    keys = {(what, seq): Codec.header(payload).key_id for what, seq, payload in rows}  # type: ignore[union-attr]
    assert keys == {**{("e", seq): "k2" for seq in range(7, 11)}, ("s", 6): "k2", ("s", 9): "k2"}


async def _snapshots(store: StateStore) -> list[RawSnapshot]:
    """The agent's stored snapshots, newest last (read through the engine)."""
    found: list[RawSnapshot] = []
    below: int | None = None
    while (snap := await store.backend.latest_snapshot("a", below)) is not None:
        found.insert(0, snap)
        below = snap.seq - 1
        if below < 1:
            break
    return found
