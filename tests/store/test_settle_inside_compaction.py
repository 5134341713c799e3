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
compaction's prune), not by timing. (The race moves the head first: every engine that
settles commits its row at the head settled and stores nothing — the window was S3's
and tiered's, whose row took no head: tests/store/_settle_race.py. S3 now refuses a
settle.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import retention_idle
from statekeeper.governance.retention import apply_retention

from ..backends._services import fresh_url
from ._settle_race import KEEP_LAST_3, check_compacted_at, expect_compacted, settle_raced


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "tiered"])
async def test_a_settle_between_a_compactions_base_and_its_prune_keeps_the_mark(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    at_prune, settled = asyncio.Event(), asyncio.Event()
    real_prune = retention_idle.prune_at  # type: ignore[attr-defined]

    async def prune_after_the_settle(*args: Any, **kwargs: Any) -> Any:
        at_prune.set()  # (the compaction's marked base is stored)
        await settled.wait()
        return await real_prune(*args, **kwargs)

    monkeypatch.setattr(retention_idle, "prune_at", prune_after_the_settle)
    compaction: list[asyncio.Task[Any]] = []

    async def meanwhile(other: StateStore) -> None:
        for n in range(11, 14):
            await other.save("a", {"n": n})
        compaction.append(asyncio.ensure_future(apply_retention(other, KEEP_LAST_3)))
        await at_prune.wait()

    async def compaction_ends() -> None:
        settled.set()
        (task,) = compaction
        expect_compacted(await task, 10)

    with fresh_url(engine, tmp_path) as url:
        await settle_raced(url, meanwhile, compaction_ends)
        await check_compacted_at(url, 10, (1, 5, 9), 13, caplog)
