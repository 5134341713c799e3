"""Rekey's counts when a stream is walked again: a walk whose final commit a retention
prune refused (``RewriteBelowPrunedBase``, nothing of that commit written) after an
earlier batch of it was committed. The second walk finds that batch under the active
key: those records were re-encrypted by this rekey, not "already done". Was: counted
both ways (events=10 and skipped=5 for a 10-event stream)."""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import RewriteRequest
from statekeeper.security import Keyring, generate_key, rekey_agent

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")


async def test_a_batch_committed_before_a_refused_walk_is_counted_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        for i in range(10):
            await store.save("a", {"n": i})
    async with StateStore(url, keyring=BOTH) as rekeying:
        real = rekeying.backend.rewrite
        log: list[str] = []

        async def rewrite(request: RewriteRequest) -> None:
            if request.snapshots and not log:  # the first walk's final commit
                log.append("refused")
                raise RewriteBelowPrunedBase("a", 3, 6)
            await real(request)

        rekeying.backend.rewrite = rewrite  # type: ignore[method-assign]
        stats = await rekey_agent(rekeying, "a", batch=5)
        assert log == ["refused"]
        assert (stats.events, stats.snapshots, stats.skipped) == (10, 3, 0), stats
        again = await rekey_agent(rekeying, "a", batch=5)  # all done now: all skipped
        assert (again.events, again.snapshots, again.skipped) == (0, 0, 13), again
