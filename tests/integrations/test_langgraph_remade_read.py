"""A saver's cached thread is not served once another process deleted the thread and
wrote it again up to the same seq.

Saver A caches a thread's document (after its own ``put``, or after reading it). Saver
B (another process on the same store) runs ``delete_thread`` and one ``put``: the
thread's head is at the same seq again, in a new stream. A head seq alone cannot tell
the two apart: ``A.get_tuple`` served A's deleted checkpoint (no error) while ``A.list``
showed B's. The checked read compares the stored head tag too (read with the seq).
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import config, new_thread


@pytest.mark.parametrize("cached_by", ["put", "read"])
def test_get_tuple_reads_a_thread_made_again_to_the_same_seq(fs_url: str, cached_by: str) -> None:
    a = StatekeeperSaver.from_url(fs_url)
    b = StatekeeperSaver.from_url(fs_url)  # another process
    try:
        thread = new_thread()
        agent = m.agent_id(a.prefix, thread)
        meta: Any = {"source": "input", "step": -1}
        if cached_by == "put":
            mine = a.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        else:
            mine = b.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        found = a.get_tuple(config(thread))  # cached by A now
        assert found is not None and found.checkpoint["id"] == mine["checkpoint_id"]
        seq = b._portal.call(b.store.head(agent))
        b.delete_thread(thread)
        theirs = b.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        assert b._portal.call(b.store.head(agent)) == seq  # the same seq, a new stream
        found = a.get_tuple(config(thread))
        assert found is not None
        assert found.checkpoint["id"] == theirs["checkpoint_id"], "a deleted checkpoint served"
        assert [t.checkpoint["id"] for t in a.list(config(thread))] == [theirs["checkpoint_id"]]
    finally:
        a.close()
        b.close()


def test_get_tuple_still_serves_an_untouched_cached_thread(fs_url: str) -> None:
    """Control: with nothing written by another, the cached document is served (the
    tag compared equal), and a write by another at a new seq is read."""
    a = StatekeeperSaver.from_url(fs_url)
    b = StatekeeperSaver.from_url(fs_url)
    try:
        thread = new_thread()
        meta: Any = {"source": "input", "step": -1}
        first = a.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        st = a._streams[thread]
        found = a.get_tuple(config(thread))
        assert found is not None and found.checkpoint["id"] == first["checkpoint_id"]
        assert a._streams[thread] is st  # served from the cache, not read again
        loop: Any = {"source": "loop", "step": 0}
        second = b.put(config(thread), empty_checkpoint(), loop, {})["configurable"]
        found = a.get_tuple(config(thread))
        assert found is not None and found.checkpoint["id"] == second["checkpoint_id"]
    finally:
        a.close()
        b.close()
