"""Where the saver finds what the thread document no longer holds (see
``statekeeper.integrations.langgraph.history``): ``list`` with a limit reads only the
end of the stream, a checkpoint put again keeps every write LangGraph's own
``InMemorySaver`` keeps, and every checkpoint is found again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import Api, Chain, checkpoint, config, new_thread


def _count_events(saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the events the saver reads from its store's streams."""
    read = [0]
    history = saver.store.history

    async def counted(agent_id: str, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in history(agent_id, **kwargs):
            read[0] += 1
            yield event

    monkeypatch.setattr(saver.store, "history", counted)
    return read


async def _long_thread(api: Api, steps: int) -> Chain:
    chain = Chain(api)
    for i in range(steps):
        saved = await chain.step({"i": i}, {"source": "loop" if i % 2 else "input"})
        await api.put_writes(saved, [("i", i + 100)], f"task-{i}", "p")
    return chain


async def test_list_with_a_limit_reads_only_the_end_of_the_stream(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = await _long_thread(api, 40)
    everything = await api.list(config(chain.thread_id))
    assert len(everything) == 40
    read = _count_events(api.saver, monkeypatch)
    one = await api.list(config(chain.thread_id), limit=1)
    assert [t.checkpoint["id"] for t in one] == [chain.ids[-1]]
    assert [t.pending_writes for t in one] == [everything[0].pending_writes]
    assert read[0] <= 8  # the stream holds 81 events: a whole scan reads them all
    read[0] = 0
    three = await api.list(config(chain.thread_id), limit=3)
    assert [t.checkpoint["id"] for t in three] == chain.ids[:-4:-1]
    assert [(t.checkpoint, t.metadata, t.pending_writes) for t in three] == [
        (t.checkpoint, t.metadata, t.pending_writes) for t in everything[:3]
    ]
    assert read[0] <= 24
    # before, filter and limit together: the same answer as the whole list
    before = config(chain.thread_id, checkpoint_id=chain.ids[30])
    got = await api.list(config(chain.thread_id), before=before, filter={"source": "loop"}, limit=4)
    whole = [
        t
        for t in everything
        if t.checkpoint["id"] < chain.ids[30] and t.metadata["source"] == "loop"
    ]
    assert [(t.checkpoint, t.pending_writes) for t in got] == [
        (t.checkpoint, t.pending_writes) for t in whole[:4]
    ]


async def test_list_with_a_limit_across_namespaces_and_puts_again(api: Api) -> None:
    """Newest first over every namespace, and a checkpoint put again counts once."""
    root = Chain(api)
    child = Chain(api, root.thread_id, "child:x")
    for i in range(5):
        await root.step({"a": i})
        await child.step({"b": i})
    again = checkpoint({"a": "again"}, {"a": 9})
    again["id"] = root.ids[1]
    fork = config(root.thread_id, "", root.ids[0])
    fork["configurable"]["allow_fork"] = True
    await api.put(fork, again, {"source": "update", "step": 9, "parents": {}}, {"a": 9})
    every_ns = {"configurable": {"thread_id": root.thread_id}}
    everything = await api.list(every_ns)
    for limit in (1, 2, 5, 9, 10, 11):
        got = await api.list(every_ns, limit=limit)
        assert [(t.config, t.checkpoint, t.metadata) for t in got] == [
            (t.config, t.checkpoint, t.metadata) for t in everything[:limit]
        ]
    assert len(everything) == 10
    put_again = [t for t in everything if t.checkpoint["id"] == root.ids[1]]
    assert [t.checkpoint["channel_values"] for t in put_again] == [{"a": "again"}]


async def test_a_checkpoint_put_again_keeps_every_write_as_in_memory_saver(api: Api) -> None:
    """LangGraph's InMemorySaver keeps a checkpoint's writes when its id is put again
    (after another checkpoint replaced it in the thread); so must we, on get_tuple of
    it as the namespace's document holds it, after another put, and in list."""
    reference = InMemorySaver()
    thread = new_thread()
    first = checkpoint({"a": 1}, {"a": 1})
    second = checkpoint({"a": 2}, {"a": 2})
    third = checkpoint({"a": 3}, {"a": 3})

    def conf(parent: str | None) -> dict[str, Any]:
        c = config(thread, checkpoint_id=parent)
        c["configurable"]["allow_fork"] = True
        return c

    meta: dict[str, Any] = {"source": "loop", "step": 0, "parents": {}}
    calls: list[tuple[str, Any]] = [
        ("put", (conf(None), first, {"a": 1})),
        ("writes", (first["id"], [("a", 10), (ERROR, "one")], "t1")),
        ("put", (conf(first["id"]), second, {"a": 2})),
        ("writes", (second["id"], [("a", 20)], "t2")),
        ("put", (conf(None), first, {"a": 1})),  # the first again
        ("writes", (first["id"], [("b", 11), (ERROR, "two")], "t2")),
        ("check", None),
        ("put", (conf(first["id"]), third, {"a": 3})),
        ("writes", (first["id"], [("c", 12)], "t3")),
        ("check", None),
        ("put", (conf(None), first, {"a": 1})),  # and once more
        ("writes", (first["id"], [("d", 13)], "t4")),
        ("check", None),
    ]
    for kind, args in calls:
        if kind == "put":
            c, cp, versions = args
            await api.put(c, cp, meta, versions)
            reference.put(c, cp, meta, versions)
        elif kind == "writes":
            cid, writes, task = args
            await api.put_writes(config(thread, checkpoint_id=cid), writes, task, "p")
            reference.put_writes(config(thread, checkpoint_id=cid), writes, task, "p")
        else:
            for cid in (first["id"], second["id"], None):
                got = await api.get_tuple(config(thread, checkpoint_id=cid))
                expected = reference.get_tuple(config(thread, checkpoint_id=cid))
                assert got is not None and expected is not None
                assert got.checkpoint["id"] == expected.checkpoint["id"]
                assert got.pending_writes == expected.pending_writes, cid
            listed = await api.list(config(thread))
            theirs = list(reference.list(config(thread)))
            assert [(t.checkpoint["id"], t.pending_writes) for t in listed] == [
                (t.checkpoint["id"], t.pending_writes) for t in theirs
            ]
    # and read cold, by a saver that has cached nothing
    cold = StatekeeperSaver(api.saver.store, _portal=api.saver._portal)
    got = cold.get_tuple(config(thread, checkpoint_id=first["id"]))
    expected = reference.get_tuple(config(thread, checkpoint_id=first["id"]))
    assert got is not None and expected is not None
    assert got.pending_writes == expected.pending_writes


async def test_every_checkpoint_is_found_by_a_saver_with_nothing_cached(api: Api) -> None:
    """Two namespaces, writes between the puts and a checkpoint put again: a new
    saver's get_tuple of each listed checkpoint returns what list returns, and an id
    never put returns None."""
    root = Chain(api)
    child = Chain(api, root.thread_id, "inner:1")
    for i in range(30):
        saved = await root.step({"i": i})
        if i % 3 == 0:
            await api.put_writes(saved, [("i", -i)], f"t{i}", "p")
        if i % 4 == 1:
            await child.step({"j": i})
    again = checkpoint({"i": "again"}, {"i": 99})
    again["id"] = root.ids[7]
    fork = config(root.thread_id, "", root.ids[6])
    fork["configurable"]["allow_fork"] = True
    await api.put(fork, again, {"source": "update", "step": 99, "parents": {}}, {"i": 99})
    await api.put_writes(config(root.thread_id, "", root.ids[7]), [("i", 7)], "late", "p")
    listed = await api.list({"configurable": {"thread_id": root.thread_id}})
    assert len(listed) == 30 + len(child.ids)
    cold = StatekeeperSaver(api.saver.store, _portal=api.saver._portal)
    for tup in listed:
        got = cold.get_tuple(tup.config)
        assert got is not None
        assert (got.checkpoint, got.metadata, got.pending_writes, got.parent_config) == (
            tup.checkpoint,
            tup.metadata,
            tup.pending_writes,
            tup.parent_config,
        )
    for near in (root.ids[0], root.ids[15], root.ids[-1]):  # ids never put: none
        absent = near[:-1] + ("0" if near[-1] != "0" else "1")
        assert cold.get_tuple(config(root.thread_id, "", absent)) is None
