"""A read that loaded a thread before a write does not put its older document back.

A ``get_tuple`` of a thread not in the saver's cache loads its document, then caches
it (``_SaverStreams._open``). While the load is in flight, other tasks of the same
saver run: a LangGraph graph's parallel subgraph runs (one per ``Send``) read and
write the same thread at once. A write committed meanwhile cached its newer document;
the read then cached the one it had loaded over it. The next write was planned on
that older document, without a head read (its compare-and-append is the check), and
its plan refused it: the put's parent was not the cached latest checkpoint, a
``CheckpointForkError`` raised into the graph run (and a run's write, its claim
missing from the older document, a ``ThreadBusyError``). The hook holds the load
until the write is committed, so the order is the failing one every time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, config, new_thread


def _hold_load(saver: StatekeeperSaver, thread: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the next load of ``thread``'s document wait for ``release`` once it has
    read the document (``entered``)."""
    entered, release = asyncio.Event(), asyncio.Event()
    original = saver._load

    async def held(thread_id: str, agent: str) -> Any:
        loaded = await original(thread_id, agent)
        if thread_id == thread and not entered.is_set():
            entered.set()
            await release.wait()
        return loaded

    saver._load = held  # type: ignore[method-assign]
    return entered, release


async def test_a_read_loaded_before_a_write_does_not_cache_its_older_document(url: str) -> None:
    saver = await StatekeeperSaver.afrom_url(url, cache_size=1)
    try:
        a, other = new_thread(), new_thread()
        first = await saver.aput(config(a), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        await saver.aput(config(other), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        entered, release = _hold_load(saver, a)  # (a evicted: cache_size=1)
        read = asyncio.create_task(saver.aget_tuple(config(a)))
        await entered.wait()  # the read holds a's document as of the first checkpoint
        second = await saver.aput(first, bare_checkpoint(), {"source": "loop", "step": 1}, {})
        release.set()
        got = await read
        assert got is not None
        assert got.checkpoint["id"] == first["configurable"]["checkpoint_id"]
        # planned on the cached document: the second checkpoint's, not the read's
        third = await saver.aput(second, bare_checkpoint(), {"source": "loop", "step": 2}, {})
        latest = await saver.aget_tuple(config(a))
        assert latest is not None
        assert latest.checkpoint["id"] == third["configurable"]["checkpoint_id"]
        assert latest.parent_config == second
    finally:
        await saver.aclose()


def _hold_append(saver: StatekeeperSaver, thread: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the next commit on ``thread`` wait for ``release`` before it appends."""
    entered, release = asyncio.Event(), asyncio.Event()
    original = saver._append

    async def held(st: Any, *args: Any, **kwargs: Any) -> Any:
        if st.thread_id == thread and not entered.is_set():
            entered.set()
            await release.wait()
        return await original(st, *args, **kwargs)

    saver._append = held  # type: ignore[method-assign]
    return entered, release


async def test_a_write_whose_entry_a_read_replaced_meanwhile_is_cached_again(url: str) -> None:
    """The write's entry is evicted during its commit and a read caches the document
    as it was before the write: the write's own (newer) document is cached after it."""
    saver = await StatekeeperSaver.afrom_url(url, cache_size=1)
    try:
        a, other = new_thread(), new_thread()
        first = await saver.aput(config(a), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        entered, release = _hold_append(saver, a)
        write = asyncio.create_task(
            saver.aput(first, bare_checkpoint(), {"source": "loop", "step": 1}, {})
        )
        await entered.wait()
        await saver.aget_tuple(config(other))  # (none: a evicted all the same)
        await saver.aput(config(other), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        got = await saver.aget_tuple(config(a))  # cached, as before the write
        assert got is not None
        assert got.checkpoint["id"] == first["configurable"]["checkpoint_id"]
        release.set()
        second = await write
        third = await saver.aput(second, bare_checkpoint(), {"source": "loop", "step": 2}, {})
        latest = await saver.aget_tuple(config(a))
        assert latest is not None
        assert latest.checkpoint["id"] == third["configurable"]["checkpoint_id"]
        assert latest.parent_config == second
    finally:
        await saver.aclose()


async def test_a_read_loaded_before_a_delete_does_not_cache_the_deleted_thread(url: str) -> None:
    """The thread deleted while a read's load is in flight: the read returns what it
    read (before the delete), and the saver keeps no document of the deleted thread."""
    saver = await StatekeeperSaver.afrom_url(url)
    try:
        a = new_thread()
        first = await saver.aput(config(a), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        saver._forget(a)  # (a read that loads it)
        entered, release = _hold_load(saver, a)
        read = asyncio.create_task(saver.aget_tuple(config(a)))
        await entered.wait()
        await saver.adelete_thread(a)
        release.set()
        got = await read
        assert got is not None
        assert got.checkpoint["id"] == first["configurable"]["checkpoint_id"]
        assert a not in saver._streams
        assert await saver.aget_tuple(config(a)) is None
    finally:
        await saver.aclose()


async def test_a_read_loaded_while_a_delete_lists_does_not_cache_the_deleted_thread(
    url: str,
) -> None:
    """The read's load starts after ``delete_thread`` dropped the cached document but
    before it deleted the streams (it lists the generations and looks for legal holds
    first): the read returns what it read, and the deleted thread is not cached."""
    saver = await StatekeeperSaver.afrom_url(url)
    try:
        a = new_thread()
        first = await saver.aput(config(a), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        entered, release = asyncio.Event(), asyncio.Event()
        original = saver._held

        async def held(thread_id: str, operation: str, agents: Any = None) -> Any:
            if thread_id == a and not entered.is_set():
                entered.set()
                await release.wait()
            return await original(thread_id, operation, agents)

        saver._held = held  # type: ignore[method-assign]
        delete = asyncio.create_task(saver.adelete_thread(a))
        await entered.wait()  # dropped from the cache, not yet deleted
        got = await saver.aget_tuple(config(a))
        assert got is not None
        assert got.checkpoint["id"] == first["configurable"]["checkpoint_id"]
        release.set()
        await delete
        assert a not in saver._streams
        assert await saver.aget_tuple(config(a)) is None
    finally:
        await saver.aclose()


async def test_a_read_loaded_while_a_bare_thread_is_dropped_does_not_cache_it(
    url: str, monkeypatch: Any
) -> None:
    """A run that stored only its claim on a new thread ends: the thread is deleted
    (``_drop_bare``) after its head is read again. A read whose load began in between
    returns what it read, and the deleted thread is not cached."""
    from statekeeper.integrations.langgraph import runs
    from statekeeper.store import delete_shown

    saver = await StatekeeperSaver.afrom_url(url)
    try:
        a = new_thread()
        run = runs.Run(a, object(), addressed=False)
        await saver._claim(run)  # (the stream holds the claim only)
        entered, release = asyncio.Event(), asyncio.Event()
        original = delete_shown.head_identity

        async def held(store: Any, agent: str) -> Any:
            if not entered.is_set():
                entered.set()
                await release.wait()
            return await original(store, agent)

        monkeypatch.setattr(delete_shown, "head_identity", held)
        drop = asyncio.create_task(saver._release(run))
        await entered.wait()  # dropped from the cache, not yet deleted
        assert await saver.aget_tuple(config(a)) is None  # (no checkpoint: claim only)
        release.set()
        await drop
        assert await saver.store.head(m.agent_id(saver.prefix, a)) == 0  # (deleted)
        assert a not in saver._streams
    finally:
        await saver.aclose()


async def test_a_read_loaded_while_a_prune_deletes_the_thread_does_not_cache_it(
    url: str,
) -> None:
    """``delete_for_runs`` drops every checkpoint of a thread: it is deleted as read
    (``_delete_read``), after its generations are listed. A read whose load began in
    between returns what it read, and the deleted thread is not cached."""
    saver = await StatekeeperSaver.afrom_url(url)
    try:
        a = new_thread()
        meta: Any = {"source": "loop", "step": 0, "run_id": "run-1"}
        first = await saver.aput(config(a), bare_checkpoint(), meta, {})
        entered, release = asyncio.Event(), asyncio.Event()
        original = saver._generations

        async def held(thread_id: str) -> Any:
            if thread_id == a and not entered.is_set():
                entered.set()
                await release.wait()
            return await original(thread_id)

        saver._generations = held  # type: ignore[method-assign]
        prune = asyncio.create_task(saver.adelete_for_runs(["run-1"]))
        await entered.wait()  # dropped from the cache, not yet deleted
        got = await saver.aget_tuple(config(a))
        assert got is not None
        assert got.checkpoint["id"] == first["configurable"]["checkpoint_id"]
        release.set()
        await prune
        assert await saver.store.head(m.agent_id(saver.prefix, a)) == 0  # (deleted)
        assert a not in saver._streams
    finally:
        await saver.aclose()
