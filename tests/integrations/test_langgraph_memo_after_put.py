"""The saver's message memo after a checkpoint put (``writes._after_put``): the memo a
put leaves is the messages it used plus those of recent writes still alive, made
without a second pass over a whole chat's messages (every entry the put used is alive:
the caller holds the values being put)."""

from __future__ import annotations

import weakref
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from statekeeper.integrations.langgraph.stream import _Stream
from statekeeper.integrations.langgraph.writes import _after_put

#: a memo entry's fingerprint (not looked at by ``_after_put``)
_FP: tuple[tuple[str, ...], tuple[Any, ...]] = ((), ())


class _CountingRef:
    """A memo entry's weak reference that counts its calls."""

    def __init__(self, target: Any, calls: list[int]) -> None:
        self._ref = weakref.ref(target)
        self._calls = calls

    def __call__(self) -> Any:
        self._calls[0] += 1
        return self._ref()


def _stream() -> _Stream:
    return _Stream("t", "lg:t", {"ns": {}, "pool": {}}, 1, {})


def test_a_put_does_not_check_again_the_messages_it_used() -> None:
    """400 messages used by a put (a chat's history): ``_after_put`` calls none of
    their weak references (the base called each once more, to drop dead entries that
    cannot be there), and the memo it leaves holds each of them as it was used."""
    messages = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(400)]
    calls = [0]
    used: dict[int, Any] = {
        id(m): (_CountingRef(m, calls), {"$p": f"k{i}"}, _FP) for i, m in enumerate(messages)
    }
    expected: dict[int, Any] = dict(used)
    st = _stream()
    assert _after_put(st, used, carried=False) == []
    assert calls[0] == 0
    assert st.memo == expected
    assert st.memo_kept == 400 and st.puts == 1


def test_a_recent_writes_messages_stay_known_and_dead_ones_do_not() -> None:
    """A message written by a task since the last put and not in the new checkpoint
    (LangGraph may put the checkpoint after its own tasks' writes) keeps its memo
    entry; an entry whose message is no longer the written one is dropped; what the
    put used wins over an older entry of the same message."""
    kept, replaced, used_msg = AIMessage("kept", id="a"), AIMessage("x", id="b"), AIMessage("u")
    st = _stream()
    other = HumanMessage("another object")
    st.memo = {
        id(kept): (weakref.ref(kept), {"$p": "ka"}, _FP),
        id(replaced): (weakref.ref(other), {"$p": "kb"}, _FP),  # not the written one
        id(used_msg): (weakref.ref(used_msg), {"$p": "old"}, _FP),
    }
    st.written = {
        id(kept): (kept, [["/w/1", {"$p": "ka"}]], 0),
        id(replaced): (replaced, [["/w/2", {"$p": "kb"}]], 0),
        id(used_msg): (used_msg, [["/w/3", {"$p": "new"}]], 0),
    }
    used: dict[int, Any] = {id(used_msg): (weakref.ref(used_msg), {"$p": "new"}, _FP)}
    _after_put(st, used, carried=False)
    assert set(st.memo) == {id(kept), id(used_msg)}
    assert st.memo[id(used_msg)][1] == {"$p": "new"}
    assert st.memo[id(kept)][1] == {"$p": "ka"}
