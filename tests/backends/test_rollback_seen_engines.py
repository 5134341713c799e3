"""The store's memory of the streams it saw (:mod:`statekeeper.store.seen`) on every
server engine: another writer's appends past the seq a store saw are never taken for a
rollback. A store whose cached state was overtaken compares the event stored at the seq
it saw with the time it saw there, which must come back from each engine as it was
stored (a time rounded by an engine would make every conflict a false
``RollbackDetected``)."""

from __future__ import annotations

import pytest

from statekeeper.backends.base import Backend
from statekeeper.store import StateStore

from .test_head_tags import backend  # noqa: F401  (the fixture: every server engine)


@pytest.mark.parametrize("snapshot_every", [100, 2])
async def test_another_writer_past_the_seq_seen_is_no_rollback(
    backend: Backend,  # noqa: F811
    snapshot_every: int,
) -> None:
    async with (
        StateStore(backend) as store,
        StateStore(backend, snapshot_every=snapshot_every) as other,
    ):
        for n in range(1, 6):
            await store.save("a", {"n": n})
        for n in range(6, 11):
            await other.save("a", {"other": n})
        # store's cached head (5) is stale: its append conflicts, the state is read again
        assert (await store.save("a", {"n": 11})).last_seq == 11
        for n in range(12, 15):
            await other.save("a", {"other": n})
        assert (await store.load("a")).data == {"other": 14}
        await other.delete("a")
        assert await store.get("a") is None
