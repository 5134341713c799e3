"""A feed page size that is not an int from 1 to 2**63-1 is refused, naming it, with
nothing read. Was: ``next_batch(0)``, ``next_batch(-1)`` and ``next_batch("3")`` each
returned one event (a caller asking for none got one, and a str limit also made the
batch swallow the ``TypeError`` its comparison raised, as it would a read error);
``batch_size=2**63`` failed inside the engine (``OverflowError`` on SQLite, a rejected
statement naming ``bigint out of range`` on PostgreSQL, ``XRANGE ... COUNT`` on Redis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import InvalidArgument
from statekeeper.feed import ProjectionRunner

from ..backends._services import fresh_url

BAD = [0, -1, "3", 2.0, True, None, 2**63]


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_bad_page_sizes_are_refused(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for n in range(3):
                await store.save("a", {"n": n})
            sub = store.subscribe(stop_at_head=True)
            for limit in BAD:
                with pytest.raises(InvalidArgument, match="limit must be an int from 1"):
                    await sub.next_batch(limit)  # type: ignore[arg-type]
                with pytest.raises(InvalidArgument, match="batch_size must be an int from 1"):
                    store.subscribe(batch_size=limit)  # type: ignore[arg-type]
                with pytest.raises(InvalidArgument, match="batch_size must be an int from 1"):
                    ProjectionRunner(store, tmp_path / "rm.db", batch_size=limit)  # type: ignore[arg-type]
            # nothing was read: the subscription hands over every event from the start
            assert [e.seq for e in await sub.next_batch(10)] == [1, 2, 3]
            # the largest page size is accepted, and reads what there is
            whole = store.subscribe(batch_size=2**63 - 1, stop_at_head=True)
            assert [e.seq async for e in whole] == [1, 2, 3]
            again = store.subscribe(stop_at_head=True)
            assert [e.seq for e in await again.next_batch(2**63 - 1)] == [1, 2, 3]


def test_the_blocking_subscription_refuses_them_too(tmp_path: Path) -> None:
    with SyncStateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.save("a", {"n": 0})
        sub = store.subscribe(stop_at_head=True)
        with pytest.raises(InvalidArgument, match="limit must be an int from 1"):
            sub.next_batch(0)
        assert [e.seq for e in sub.next_batch(5)] == [1]
