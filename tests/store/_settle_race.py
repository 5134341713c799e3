"""A settle raced by another process's retention run (``keep_last``) at named points —
the settle's policy step, after its last look at the head and before its write — never
by timing; and the loads that check what the race left (tests/store/test_settle_*.py,
test_load_during_compaction.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, RetentionReport, apply_retention

__all__ = ["KEEP_LAST_3", "check_compacted_at", "compacted", "expect_compacted", "settle_raced"]

KEEP_LAST_3 = RetentionPolicy.parse("* keep_last=3")


def expect_compacted(report: RetentionReport, base: int) -> None:
    """The run compacted the one agent to ``base``."""
    assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [("compact", "done", base)]


async def compacted(store: StateStore, base: int) -> None:
    """A retention run (``keep_last=3``) through ``store``: the agent compacted to ``base``."""
    expect_compacted(await apply_retention(store, KEEP_LAST_3), base)


async def settle_raced(
    url: str,
    meanwhile: Callable[[StateStore], Awaitable[None]],
    after: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Agent ``a`` written to seq 10 (``{"n": n}`` at seq n), then settled at 10 with
    ``meanwhile(other)`` run after the settle's last look at the head, before its write
    (``other``: another store on ``url``, as another process); ``after()`` once the
    settle returned or raised, the stores still open. The settle stores nothing
    (``meanwhile`` moves the head, and the row is committed only at the head settled:
    store/settle.py)."""
    async with (
        StateStore(url, snapshot_every=4, full_snapshot_every=1) as settler,
        StateStore(url, snapshot_every=4, full_snapshot_every=1) as other,
    ):
        for n in range(1, 11):
            await settler.save("a", {"n": n})
        # (was: S3 and tiered stored the row with no head, late, at 10 — now every
        # engine that settles commits it at the head's identity, and S3 refuses a settle)
        policy = settler._writes.snapshots
        prepare = policy.prepare

        async def raced(record: Any) -> None:
            await meanwhile(other)
            await prepare(record)

        policy.prepare = raced  # type: ignore[method-assign]
        try:
            assert await settler.settle("a") is None
        finally:
            policy.prepare = prepare  # type: ignore[method-assign]
            if after is not None:
                await after()


async def check_compacted_at(
    url: str, base: int, below: tuple[int, ...], head: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Loads at ``below`` raise HistoryCompacted naming ``base`` (not IntegrityError,
    'history deleted'), with no warning; the base and the head load; verify is ok."""
    caplog.clear()
    async with StateStore(url) as store:
        with caplog.at_level(logging.WARNING, logger="statekeeper"):
            for seq in below:
                with pytest.raises(HistoryCompacted) as caught:
                    await store.load("a", at_seq=seq)
                assert caught.value.base_seq == base
            assert (await store.load("a", at_seq=base)).data == {"n": base}
            assert (await store.load("a")).data == {"n": head}
            assert (await store.verify()).ok
        assert [r.getMessage() for r in caplog.records if r.name.startswith("statekeeper")] == []
