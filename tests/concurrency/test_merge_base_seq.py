"""merge_into refuses a base_seq that names no state (negative, not an int) with
InvalidArgument before anything is read or written: a negative one met a bare
AssertionError on a new agent and, on an existing one, merged as if the copy had no
base (or reported a MergeConflict that was not one); a string one a TypeError."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.concurrency import CRDTs, GCounter, Merger, Version, merge_into
from statekeeper.concurrency import sync as sync_face
from statekeeper.errors import InvalidArgument

BAD = [-1, -5, 1.5, True, "1", None]


@pytest.mark.parametrize("base_seq", BAD)
def test_a_base_seq_naming_no_state_is_refused(base_seq: Any) -> None:
    async def run() -> None:
        async with StateStore("memory://") as store:
            ours = Version({"likes": GCounter({"laptop": 2}).to_json()})
            merger = Merger(fields={"likes": CRDTs()})
            with pytest.raises(InvalidArgument, match="base_seq must be an int >= 0") as caught:
                await merge_into(store, "new", ours, base_seq=base_seq, merger=merger)
            assert caught.value.argument == "base_seq"
            assert await store.get("new") is None
            await store.save("old", {"likes": GCounter({"server": 1}).to_json()})
            with pytest.raises(InvalidArgument, match="base_seq"):
                await merge_into(store, "old", ours, base_seq=base_seq, merger=merger)
            assert (await store.load("old")).seq == 1

    asyncio.run(run())


def test_the_sync_face_refuses_it_too() -> None:
    with SyncStateStore("memory://") as store:
        with pytest.raises(InvalidArgument, match="base_seq"):
            sync_face.merge_into(store, "new", Version({"n": 1}), base_seq=-1)
        assert store.get("new") is None
