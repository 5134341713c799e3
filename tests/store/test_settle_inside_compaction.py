"""A settle whose row lands *inside* a compaction to its seq: another process's
retention run (``keep_last``, not governed) stores its marked base at the seq, the
settle stores its own (unmarked) row there over it and looks at the stream's base —
not moved yet, the events are still there — then the compaction prunes the events
below. store/settle.py's check after its write (the base at its very seq) cannot see
this: the prune comes after it.

Before: the base row left was the settle's, unmarked, with no process killed — every
load below the base raised IntegrityError ('events 1..10 are gone and no compaction
removed them ... the stream's history was deleted'), verify reported it, an export
failed. The interleaving is made at named points (the settle's policy step, the
compaction's prune), not by timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance import retention_idle
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "s3", "tiered"])
async def test_a_settle_between_a_compactions_base_and_its_prune_keeps_the_mark(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as settler,
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as other,
        ):
            for n in range(1, 11):
                await settler.save("a", {"n": n})
            at_prune, settled = asyncio.Event(), asyncio.Event()
            real_prune = retention_idle.prune_at  # type: ignore[attr-defined]

            async def prune_after_the_settle(*args: Any, **kwargs: Any) -> Any:
                at_prune.set()  # (the compaction's marked base is stored)
                await settled.wait()
                return await real_prune(*args, **kwargs)

            monkeypatch.setattr(retention_idle, "prune_at", prune_after_the_settle)
            settler.backend.replaces_snapshots = False  # (two commits)
            policy = settler._writes.snapshots
            prepare = policy.prepare
            compaction: asyncio.Task[Any] | None = None

            async def meanwhile(record: Any) -> None:
                # after the settle's last look at the head (10), before its write
                nonlocal compaction
                for n in range(11, 14):
                    await other.save("a", {"n": n})
                compaction = asyncio.ensure_future(
                    apply_retention(other, RetentionPolicy.parse("* keep_last=3"))
                )
                await at_prune.wait()
                await prepare(record)

            policy.prepare = meanwhile  # type: ignore[method-assign]
            try:
                assert await settler.settle("a") == 10
            finally:
                policy.prepare = prepare  # type: ignore[method-assign]
                settled.set()
            assert compaction is not None
            report = await compaction
            assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [
                ("compact", "done", 10)
            ]
        async with StateStore(url) as store:
            for seq in (1, 5, 9):
                with pytest.raises(HistoryCompacted) as caught:
                    await store.load("a", at_seq=seq)
                assert caught.value.base_seq == 10
            assert (await store.load("a", at_seq=10)).data == {"n": 10}
            assert (await store.load("a")).data == {"n": 13}
            assert (await store.verify()).ok
