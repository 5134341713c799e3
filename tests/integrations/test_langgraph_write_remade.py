"""A saver's write onto a thread made again to the same seq is planned again, on it.

A write is planned on the thread's cached document and appended at its seq. If another
process deleted the thread and wrote it again up to that same seq meanwhile, the cached
head's conflict made the store read the head again, and the seq alone passed: the ops
planned on the deleted stream's document were applied onto the other one. A checkpoint
whose value this saver had pooled before then named the other stream's pooled value at
that place: ``put`` (and ``copy_thread`` into the thread) acknowledged a checkpoint that
reads back with another process's data, without an error. Here the write is refused at
the stream's identity (its head tag) and planned again on the stream there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import config, new_thread

MINE, THEIRS = "mine " * 1000, "theirs " * 1000  # (pooled: large)


def _checkpoint(value: str, version: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": version}
    return cp


@pytest.mark.parametrize("evicted", [False, True])
@pytest.mark.parametrize("op", ["put", "copy_thread"])
async def test_a_write_onto_a_thread_made_again_keeps_its_values(
    fs_url: str, op: str, evicted: bool
) -> None:
    saver = await StatekeeperSaver.afrom_url(fs_url)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread, source = new_thread(), new_thread()
    base = m.agent_id(saver.prefix, thread)
    try:
        await saver.aput(config(thread), _checkpoint(MINE, 1), {"step": 0}, {"x": 1})
        await saver.aput(config(thread), _checkpoint(MINE, 2), {"step": 1}, {"x": 2})
        head = await saver.store.head(base)

        def remake() -> None:  # deleted and written again up to the same seq
            other.delete_thread(thread)
            version = 0
            while other._portal.call(other.store.head(base)) < head:
                version += 1
                cp = _checkpoint(THEIRS, version)
                other.put(config(thread), cp, {"step": 9}, {"x": version})
            assert other._portal.call(other.store.head(base)) == head

        await asyncio.to_thread(remake)
        if evicted:  # the saver's store no longer holds the record (its cache let it go)
            saver.store._cache._data.pop(base, None)
        mine = _checkpoint(MINE, 3)
        if op == "put":
            await saver.aput(config(thread), mine, {"step": 2}, {"x": 3})
        else:
            await saver.aput(config(source), mine, {"step": 2}, {"x": 3})
            await saver.acopy_thread(source, thread)
        found = await asyncio.to_thread(
            other.get_tuple,
            {
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": "",
                    "checkpoint_id": mine["id"],
                }
            },
        )
        assert found is not None, "the acknowledged checkpoint is not there"
        assert found.checkpoint["channel_values"]["x"] == MINE, (
            "the checkpoint written reads back with the other process's value"
        )
        # the other process's checkpoints are there, unchanged
        theirs = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert [t.checkpoint["channel_values"]["x"] for t in theirs[1:]] == [THEIRS] * (
            len(theirs) - 1
        )
        assert len(theirs) == head  # (its creation, then one event a checkpoint)
    finally:
        other.close()
        await saver.aclose()
