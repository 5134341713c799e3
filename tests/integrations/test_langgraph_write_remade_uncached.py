"""A saver on a store whose record cache is off still tells a thread made again.

The saver remembers the head tag of each thread's stream (to refuse a write onto a
stream deleted and made again up to the same seq by another process: see
``test_langgraph_write_remade``), and it took that tag from the store's cached record.
On a store opened with ``cache_size=0`` there is none: the tag was never known, the
write was made at the seq alone, and an acknowledged checkpoint read back with the
other process's values. The store now tells the saver the tag of the state a read
returned or a write made (``Seen.adopted_tag``). A compaction's fence
(``test_langgraph_prune_remade``) had the same hole: with the cache off it fenced, and
its delete then deleted, the other process's stream.
"""

from __future__ import annotations

import asyncio

import pytest

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.integrations.langgraph.loop import BoundLoop

from . import test_langgraph_prune_remade as prune_remade
from .conftest import config, new_thread
from .test_langgraph_write_remade import MINE, THEIRS, _checkpoint


@pytest.mark.parametrize("op", ["put", "copy_thread"])
async def test_a_write_onto_a_thread_made_again_with_the_cache_off(fs_url: str, op: str) -> None:
    store = StateStore(fs_url, cache_size=0)
    saver = StatekeeperSaver(store, _portal=BoundLoop(asyncio.get_running_loop()))
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread, source = new_thread(), new_thread()
    base = m.agent_id(saver.prefix, thread)
    try:
        await saver.aput(config(thread), _checkpoint(MINE, 1), {"step": 0}, {"x": 1})
        await saver.aput(config(thread), _checkpoint(MINE, 2), {"step": 1}, {"x": 2})
        head = await store.head(base)

        def remake() -> None:  # deleted and written again up to the same seq
            other.delete_thread(thread)
            version = 0
            while other._portal.call(other.store.head(base)) < head:
                version += 1
                cp = _checkpoint(THEIRS, version)
                other.put(config(thread), cp, {"step": 9}, {"x": version})
            assert other._portal.call(other.store.head(base)) == head

        await asyncio.to_thread(remake)
        mine = _checkpoint(MINE, 3)
        if op == "put":
            await saver.aput(config(thread), mine, {"step": 2}, {"x": 3})
        else:
            await saver.aput(config(source), mine, {"step": 2}, {"x": 3})
            await saver.acopy_thread(source, thread)
        wanted = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        wanted["configurable"]["checkpoint_id"] = mine["id"]
        found = await asyncio.to_thread(other.get_tuple, wanted)
        assert found is not None, "the acknowledged checkpoint is not there"
        assert found.checkpoint["channel_values"]["x"] == MINE, (
            "the checkpoint written reads back with the other process's value"
        )
        theirs = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert [t.checkpoint["channel_values"]["x"] for t in theirs[1:]] == [THEIRS] * (
            len(theirs) - 1
        )
    finally:
        other.close()
        await saver.aclose()
        await store.close()


async def _uncached(url: str) -> StatekeeperSaver:
    """A saver (as ``afrom_url`` makes one) on a store whose record cache is off."""
    store = StateStore(url, cache_size=0)
    return StatekeeperSaver(store, _portal=BoundLoop(asyncio.get_running_loop()), _owns_store=True)


@pytest.mark.parametrize("moment", ["at_fence", "at_delete", "at_delete_same_seq"])
@pytest.mark.parametrize("op", sorted(prune_remade.OPS))
async def test_a_compaction_spares_a_thread_made_again_with_the_cache_off(
    fs_url: str, op: str, moment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StatekeeperSaver, "afrom_url", staticmethod(_uncached))
    await prune_remade.test_a_compaction_spares_a_thread_made_again(fs_url, op, moment)


@pytest.mark.parametrize("same_seq", [False, True], ids=["any_seq", "same_seq"])
async def test_finishing_a_cut_over_spares_a_thread_made_again_with_the_cache_off(
    fs_url: str, same_seq: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StatekeeperSaver, "afrom_url", staticmethod(_uncached))
    await prune_remade.test_finishing_a_cut_over_spares_a_thread_made_again(fs_url, same_seq)


async def test_an_expired_thread_is_deleted_only_as_read_with_the_cache_off(
    fs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StatekeeperSaver, "afrom_url", staticmethod(_uncached))
    await prune_remade.test_an_expired_thread_is_deleted_only_as_read(fs_url, False)
