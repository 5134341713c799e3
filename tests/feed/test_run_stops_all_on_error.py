"""``ProjectionRunner.run()`` that raises stops every projection's task first.

Before, ``run()`` followed each projection in an ``asyncio.gather``: when one raised
(a killed rebuild resumed by the live runner raising ``ProjectionRebuildOutpaced``),
the error left ``run()`` while the other projections' tasks went on following the
feed on their own — applying to the read model with nobody awaiting them, their
errors never seen, the runner's database closed under them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ProjectionRebuildOutpaced
from statekeeper.feed import ProjectionRunner


async def test_an_error_in_one_projection_stops_the_others_before_run_raises(
    tmp_path: Path,
) -> None:
    async with (
        StateStore(f"sqlite:///{tmp_path / 's.db'}") as store,
        ProjectionRunner(store, tmp_path / "rm.db") as runner,
    ):
        names = sorted(runner.projections)
        assert len(names) >= 2
        first, others = names[0], names[1:]
        following: set[str] = set()
        all_following = asyncio.Event()
        stopped: set[str] = set()

        async def follow(projection: Any, **_: Any) -> int:
            if projection.name == first:
                await all_following.wait()  # (the others are running)
                raise ProjectionRebuildOutpaced(first, 3, 7)
            following.add(projection.name)
            if following == set(others):
                all_following.set()
            try:
                await asyncio.Event().wait()  # (live: until cancelled)
            finally:
                stopped.add(projection.name)
            return 0

        runner._follow = follow  # type: ignore[method-assign]
        with pytest.raises(ProjectionRebuildOutpaced):
            await runner.run()
        assert stopped == set(others)  # every other task ended before run() raised
