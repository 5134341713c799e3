"""A subscription resumed from a position beyond the feed's head — a consumer's stored
cursor after its store was restored from an older backup, or another store's cursor —
delivered nothing until the feed got past that position: every event in between was
passed over without a word. It is refused now (``InvalidArgument``, as ``trim_feed``
refuses such a cursor); a position at the head still waits for the next event."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_resume_point_past_the_head_is_refused(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for n in range(3):
                await store.save("a", {"n": n})
            _, head = await store.feed_bounds()
            beyond = store.subscribe(from_position=head + 50, stop_at_head=True)
            with pytest.raises(InvalidArgument, match="beyond the feed's head"):
                await anext(beyond)
            for n in range(3, 6):
                await store.save("a", {"n": n})
            # the events after the old head reach a consumer resumed there
            caught = store.subscribe(from_position=head, stop_at_head=True)
            assert [e.event.seq async for e in caught] == [4, 5, 6]
