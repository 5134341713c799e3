"""An explicit ``settle`` of the saver's store — or any read of the thread's agent in
this process (``get``, ``snapshot``) — never moves a planned write onto a thread made
again by another process.

The saver plans a write on the stream it holds (its document at a seq) and appends it
on the store's cached record at that seq: the engine's compare-and-set on the cached
head tag is what refuses a thread deleted and made again by another process up to the
same seq (the write is then planned again on a fresh read). ``StateStore.settle`` read
the agent through the read path, which *replaced* that cached record with the remade
stream's; the write planned on the old stream then passed the compare-and-set on the
new one — its ops applied to the other process's thread, and this saver serving the old
thread's document as the new one's (a lost or mixed checkpoint, no error). The hook
makes the other process remake the thread, and a settle run, between the plan and its
append.

A settle now drops the record its read replaced; but a plain ``store.get`` (or a
``store.snapshot``) of the thread's agent in this process read the remade stream into
the cache the same way, and the saver's fast appends (``append_applied``, the lean
append) took that record for the one planned on: its seq alone was checked. They now
take it only at the head tag the saver holds of the thread (else the checked append,
which refuses it).
"""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from ..backends._services import POSTGRES_DSN, require_postgres
from .conftest import bare_checkpoint, config, new_thread, off_context


@pytest.fixture(params=["shared", "postgres"])
def shared_url(request: pytest.FixtureRequest, fs_url: str) -> str:
    if request.param == "shared":
        return fs_url
    if not fs_url.startswith("sqlite"):
        pytest.skip("PostgreSQL once")
    require_postgres()
    return POSTGRES_DSN  # (unique thread ids: sharing the database is safe)


async def _between(saver: StatekeeperSaver, how: str, agent: str) -> object:
    """What runs in this process between the plan and its append."""
    if how == "settle":
        return await saver.store.settle(agent)
    if how == "get":
        return await saver.store.get(agent)
    return await saver.store.snapshot(agent)


@pytest.mark.parametrize("how", ["settle", "get", "snapshot"])
async def test_a_settle_between_plan_and_append_spares_the_remade_thread(
    shared_url: str, how: str
) -> None:
    saver = await StatekeeperSaver.afrom_url(shared_url)
    other = StatekeeperSaver.from_url(shared_url)  # another process
    thread = new_thread()
    base = m.agent_id(saver.prefix, thread)
    acked: list[str] = []
    settled: list[object] = []
    try:
        cfg = config(thread)
        for step in range(2):
            await saver.aput(cfg, bare_checkpoint(), {"source": "loop", "step": step}, {})
        head = await saver.store.head(base)

        def remake() -> None:
            other.delete_thread(thread)
            done = other.put(cfg, bare_checkpoint(), {"source": "input", "step": -1}, {})
            acked.append(done["configurable"]["checkpoint_id"])
            n = 0
            while other._portal.call(other.store.head(base)) < head:
                other.put_writes(done, [("messages", n)], f"task-{n}")
                n += 1
            assert other._portal.call(other.store.head(base)) == head

        append = saver._append

        async def hooked(st: Any, *a: Any, **kw: Any) -> Any:
            if st.agent_id == base and not acked:
                await off_context(remake)
                settled.append(await _between(saver, how, base))
            return await append(st, *a, **kw)

        saver._append = hooked  # type: ignore[method-assign]
        mine = await saver.aput(cfg, bare_checkpoint(), {"source": "loop", "step": 2}, {})
        assert acked and settled, "the hook never ran"
        # the other process's checkpoint is there, and this saver's write after it
        fresh = StatekeeperSaver.from_url(shared_url)  # a process that reads it now
        try:
            stored = [(t.checkpoint["id"], t.pending_writes) for t in fresh.list(cfg)]
            stored_doc = fresh._portal.call(fresh.store.get(base))
        finally:
            fresh.close()
        ids = sorted(s[0] for s in stored)
        assert ids == sorted([mine["configurable"]["checkpoint_id"], acked[0]]), (
            "the thread made again lost its checkpoint"
        )
        # this saver serves what is stored: its document is the stored one, not the
        # deleted thread's with this write's ops (the other process's writes missing)
        held = await saver.store.get(base)
        assert held is not None and stored_doc is not None
        assert held.data == stored_doc.data, (
            "a write planned on the deleted thread was applied to the one made again"
        )
        for cid, writes in stored:
            got = await saver.aget_tuple(
                {"configurable": {**cfg["configurable"], "checkpoint_id": cid}}
            )
            assert got is not None and got.pending_writes == writes
    finally:
        other.close()
        await saver.aclose()
