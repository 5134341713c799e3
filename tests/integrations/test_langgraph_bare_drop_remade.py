"""A run that stored nothing drops its bare thread stream — never another one.

``invoke(None)`` on a new thread claims it (the stream is created, then the claim:
head 2), LangGraph refuses the input, and the run's end deletes the stream instead of
releasing the claim (``_SaverClaims._drop_bare``). If another process deletes the
thread and writes it again up to the same seq meanwhile (here: its ``delete_thread``,
then one checkpoint ``put``: head 2 again), a head seq alone cannot tell the two
streams apart: the drop deleted the other process's stream, its acknowledged
checkpoint lost without an error. The hooks make the other process act at the two
moments it can: after this saver cached its bare document and before the drop looks
(``before_drop``), and after the drop's reads, just before its delete (``at_delete``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.errors import EmptyInputError

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import new_thread, off_context, reply_graph


@pytest.mark.parametrize("moment", ["before_drop", "at_delete"])
async def test_a_bare_drop_spares_a_thread_made_again_to_the_same_seq(
    fs_url: str, moment: str
) -> None:
    saver = await StatekeeperSaver.afrom_url(fs_url)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread = new_thread()
    agent = m.agent_id(saver.prefix, thread)
    checkpoint = empty_checkpoint()
    acked: list[str] = []

    def remake() -> None:
        assert other._portal.call(other.store.head(agent)) == 2  # the bare stream
        other.delete_thread(thread)
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        done = other.put(cfg, checkpoint, {"source": "input", "step": -1}, {})
        acked.append(done["configurable"]["checkpoint_id"])
        assert other._portal.call(other.store.head(agent)) == 2  # the same seq again

    try:
        if moment == "before_drop":
            drop = saver._drop_bare

            async def hooked_drop(run: Any) -> bool:
                await off_context(remake)
                return await drop(run)

            saver._drop_bare = hooked_drop  # type: ignore[method-assign]
        else:
            store = saver.store
            delete = store.delete

            async def hooked_delete(agent_id: str) -> bool:
                if agent_id == agent and not acked:
                    await off_context(remake)
                return await delete(agent_id)

            store.delete = hooked_delete  # type: ignore[method-assign]
        g = reply_graph().compile(checkpointer=saver)
        with pytest.raises(EmptyInputError):
            await g.ainvoke(None, {"configurable": {"thread_id": thread}})
        assert acked, "the hook never ran: the run's end did not drop its bare thread"
        # the other process's acknowledged checkpoint is there, in its stream
        found = await asyncio.to_thread(
            other.get_tuple, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        )
        assert found is not None, "the thread made again was deleted: its checkpoint lost"
        assert found.checkpoint["id"] == acked[0]
        assert other._portal.call(other.store.head(agent)) == 2  # nothing more written
        # and nobody holds it: the other process runs the thread at once
        og = reply_graph().compile(checkpointer=other)
        out = await asyncio.to_thread(
            og.invoke, {"messages": [("user", "hi")]}, {"configurable": {"thread_id": thread}}
        )
        assert [x.content for x in out["messages"]] == ["hi", "hello"]
    finally:
        other.close()
        await saver.aclose()


async def test_a_bare_drop_still_drops_an_untouched_thread(fs_url: str) -> None:
    """Control: the drop's reads find the stream as cached, and delete it."""
    saver = await StatekeeperSaver.afrom_url(fs_url)
    try:
        thread = new_thread()
        g = reply_graph().compile(checkpointer=saver)
        with pytest.raises(EmptyInputError):
            await g.ainvoke(None, {"configurable": {"thread_id": thread}})
        assert await saver.store.head(m.agent_id(saver.prefix, thread)) == 0
    finally:
        await saver.aclose()
