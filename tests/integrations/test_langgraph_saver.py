"""Behaviour of every ``StatekeeperSaver`` method against LangGraph's documented
semantics (and its in-memory saver), sync and async, on each backend."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import orjson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED

from statekeeper import ConflictError, StateStore
from statekeeper.integrations.langgraph import CheckpointForkError, StatekeeperSaver

from .conftest import Api, Chain, checkpoint, config, new_thread


def events(saver: StatekeeperSaver, thread_id: str, kind: str | None = None) -> list[Any]:
    """The thread's stream events (the live generation)."""

    async def read() -> list[Any]:
        st = await saver._open(thread_id, create=False)
        assert st is not None
        return [e async for e in saver.store.history(st.agent_id) if kind is None or e.type == kind]

    return saver._portal.call(read())


# -- get_tuple -----------------------------------------------------------------------


async def test_get_tuple_latest_and_by_id(api: Api) -> None:
    chain = Chain(api)
    await chain.step({"a": 1})
    await chain.step({"a": 2, "b": "x"})
    latest = await api.get_tuple(config(chain.thread_id))
    assert latest is not None
    assert latest.checkpoint["id"] == chain.ids[-1]
    assert latest.checkpoint["channel_values"] == {"a": 2, "b": "x"}
    assert latest.config == config(chain.thread_id, "", chain.ids[-1])
    assert latest.parent_config == config(chain.thread_id, "", chain.ids[0])
    assert latest.metadata == {"source": "loop", "step": 1, "parents": {}}
    first = await api.get_tuple(config(chain.thread_id, checkpoint_id=chain.ids[0]))
    assert first is not None
    assert first.checkpoint["channel_values"] == {"a": 1}
    assert first.checkpoint["channel_versions"] == {"a": 1}
    assert first.parent_config is None
    assert first.config == config(chain.thread_id, checkpoint_id=chain.ids[0])  # as given
    assert await api.get_tuple(config(chain.thread_id, checkpoint_id="nope")) is None
    assert await api.get_tuple(config(new_thread())) is None
    assert await api.get_tuple(config(chain.thread_id, ns="other")) is None


async def test_checkpoint_fields_round_trip_exactly(api: Api) -> None:
    thread = new_thread()
    cp = checkpoint(
        {"msgs": [HumanMessage("hi", id="1"), AIMessage("yo", id="2")], "n": 3},
        {
            "msgs": "00000000000000000000000000000001.0.5",
            "n": "00000000000000000000000000000001.0.7",
        },
        versions_seen={"node": {"msgs": "00000000000000000000000000000001.0.5"}},
        updated_channels=["msgs", "n"],
        pending_sends=[],
    )
    meta = {"source": "input", "step": -1, "parents": {"": "p"}, "custom": [1, "two"]}
    await api.put(config(thread), cp, meta, dict(cp["channel_versions"]))
    got = await api.get_tuple(config(thread))
    assert got is not None
    assert got.checkpoint == cp
    assert got.metadata == meta
    # what we hand out is ours to lose: mutating it does not touch the saver's cache
    got.checkpoint["channel_versions"]["n"] = "tampered"
    got.checkpoint["channel_values"]["msgs"].append("x")
    again = await api.get_tuple(config(thread))
    assert again is not None and again.checkpoint == cp


async def test_namespaces_are_separate(api: Api) -> None:
    root = Chain(api)
    child = Chain(api, root.thread_id, ns="child:1")
    await root.step({"a": "root"})
    await child.step({"a": "child"})
    got_root = await api.get_tuple(config(root.thread_id))
    got_child = await api.get_tuple(config(root.thread_id, "child:1"))
    assert got_root is not None and got_child is not None
    assert got_root.checkpoint["channel_values"] == {"a": "root"}
    assert got_child.checkpoint["channel_values"] == {"a": "child"}
    assert got_child.config["configurable"]["checkpoint_ns"] == "child:1"


# -- put / new_versions --------------------------------------------------------------


async def test_put_stores_a_channel_value_once_per_version(api: Api) -> None:
    chain = Chain(api)
    big = {"document": "x" * 500}
    await chain.step({"big": big, "counter": 0})
    for i in range(1, 6):
        await chain.step({"counter": i})  # "big" keeps its version: not in new_versions
    payloads = [orjson.dumps(e.ops) for e in events(api.saver, chain.thread_id, "lg.cp")]
    assert len(payloads) == 6
    assert sum(p.count(b"x" * 500) for p in payloads) == 1
    # and every checkpoint still reads back with the big value
    for cid in chain.ids:
        got = await api.get_tuple(config(chain.thread_id, checkpoint_id=cid))
        assert got is not None and got.checkpoint["channel_values"]["big"] == big


async def test_a_growing_list_costs_only_its_new_items(api: Api) -> None:
    chain = Chain(api)
    messages: list[Any] = []
    for i in range(10):
        messages = [*messages, AIMessage(f"message number {i} " + "z" * 100, id=f"m{i}")]
        await chain.step({"messages": messages})
    cp_events = events(api.saver, chain.thread_id, "lg.cp")
    for i, event in enumerate(cp_events):
        body = orjson.dumps(event.ops)
        # each message body is written exactly once, in the checkpoint that added it
        assert body.count(b"message number") == 1, i
        if i:
            assert any(op["path"].endswith("/vals/messages/-") for op in event.ops)
    latest = await api.get_tuple(config(chain.thread_id))
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == messages
    middle = await api.get_tuple(config(chain.thread_id, checkpoint_id=chain.ids[4]))
    assert middle is not None and middle.checkpoint["channel_values"]["messages"] == messages[:5]


async def test_same_message_in_a_write_and_a_channel_is_stored_once(api: Api) -> None:
    chain = Chain(api)
    saved = await chain.step({"messages": [HumanMessage("hello", id="h")]})
    reply = AIMessage("a long enough reply to be pooled " * 3, id="r")
    await api.put_writes(saved, [("messages", [reply])], "task-1")
    await chain.step({"messages": [HumanMessage("hello", id="h"), reply]})
    body = b"".join(orjson.dumps(e.ops) for e in events(api.saver, chain.thread_id))
    assert body.count(b"a long enough reply") == 3  # the text repeats 3x in one message


async def test_put_returns_config_and_accepts_missing_values(api: Api) -> None:
    thread = new_thread()
    cp = checkpoint({"a": 1}, {"a": 1, "gone": 1})
    saved = await api.put(config(thread), cp, {}, {"a": 1, "gone": 1})
    assert saved == config(thread, "", cp["id"])
    got = await api.get_tuple(saved)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": 1}  # no value: not stored (like LangGraph)
    assert got.checkpoint["channel_versions"] == {"a": 1, "gone": 1}


async def test_metadata_from_config_is_merged(api: Api) -> None:
    thread = new_thread()
    conf = config(thread)
    conf["metadata"] = {"user": "ann", "thread_id": "ignored", "__private": 1, "obj": object()}
    conf["configurable"]["tenant"] = "acme"
    cp = checkpoint({}, {})
    await api.put(conf, cp, {"source": "input", "step": -1}, {})
    got = await api.get_tuple(config(thread))
    assert got is not None
    assert got.metadata == {"source": "input", "step": -1, "user": "ann", "tenant": "acme"}


async def test_fork_from_an_older_checkpoint_reads_back_exactly(api: Api) -> None:
    chain = Chain(api)
    await chain.step({"a": "a1", "b": "b1"})
    await chain.step({"a": "a2"})
    await chain.step({"b": "b3"})
    # fork from the first checkpoint: b keeps version 1, a changes (a fork asked for)
    cp = checkpoint({"a": "fork", "b": "b1"}, {"a": 9, "b": 1})
    parent = config(chain.thread_id, checkpoint_id=chain.ids[0])
    parent["configurable"]["allow_fork"] = True
    forked = await api.put(parent, cp, {"step": 1}, {"a": 9})
    got = await api.get_tuple(forked)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": "fork", "b": "b1"}
    assert got.parent_config == config(chain.thread_id, "", chain.ids[0])
    latest = await api.get_tuple(config(chain.thread_id))
    assert latest is not None and latest.checkpoint["id"] == cp["id"]
    old = await api.get_tuple(config(chain.thread_id, checkpoint_id=chain.ids[2]))
    assert old is not None and old.checkpoint["channel_values"] == {"a": "a2", "b": "b3"}


async def test_older_checkpoints_are_kept_for_the_threads_read_last_only(url: str) -> None:
    """The kept older checkpoints follow the built-message cache: only the threads read
    most recently keep theirs (memory stays bounded with many threads)."""
    from statekeeper.integrations.langgraph import reads as saver_reads

    with StatekeeperSaver.from_url(url) as saver:
        api = Api(saver, "async")
        chains = [Chain(api) for _ in range(saver_reads._BUILT_THREADS + 1)]
        for chain in chains:
            await chain.step({"a": "one"})
            await chain.step({"a": "two"})
        loads: list[str] = []  # older checkpoints looked up in storage (by their key)
        store_find_key = saver.store.find_key

        async def counted(agent_id: str, key: str) -> Any:
            loads.append(key)
            return await store_find_key(agent_id, key)

        saver.store.find_key = counted  # type: ignore[method-assign]
        for chain in chains:  # the first thread's kept entry goes when the last is read
            await api.get_tuple(config(chain.thread_id, checkpoint_id=chain.ids[0]))
        assert len(loads) == len(chains)
        got = await api.get_tuple(config(chains[-1].thread_id, checkpoint_id=chains[-1].ids[0]))
        assert got is not None and got.checkpoint["channel_values"] == {"a": "one"}
        assert len(loads) == len(chains)
        got = await api.get_tuple(config(chains[0].thread_id, checkpoint_id=chains[0].ids[0]))
        assert got is not None and got.checkpoint["channel_values"] == {"a": "one"}
        assert len(loads) == len(chains) + 1


@pytest.mark.parametrize(("option", "value"), [("writes_wait", -0.001), ("run_lease", 0)])
def test_a_bad_timing_option_is_refused_and_opens_nothing(
    tmp_path: Any, option: str, value: float
) -> None:
    """``writes_wait`` < 0 or ``run_lease`` <= 0: ``ConfigurationError`` naming the
    option, and the store ``from_url`` opened for it is closed again (no loop thread
    left running)."""
    import threading

    from statekeeper import ConfigurationError

    before = {t for t in threading.enumerate() if t.name == "statekeeper-langgraph"}
    with pytest.raises(ConfigurationError, match=option):
        StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/bad.db", **{option: value})
    after = {t for t in threading.enumerate() if t.name == "statekeeper-langgraph"}
    assert after <= before


_BAD_SAVER_OPTIONS = [
    {"prefix": ""},
    {"prefix": "lg#"},
    {"prefix": "lg//"},
    {"writes_wait": -0.001},
    {"run_lease": 0},
]


@pytest.mark.parametrize("bad", _BAD_SAVER_OPTIONS, ids=lambda bad: "-".join(map(str, bad.items())))
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
@pytest.mark.parametrize("opener", ["from_url", "afrom_url"])
def test_a_bad_saver_option_is_refused_before_any_store_is_opened(
    tmp_path: Any, engine: str, opener: str, bad: dict[str, Any]
) -> None:
    """``from_url`` / ``afrom_url`` with a saver option it refuses: the
    ``ConfigurationError`` comes before the store is opened, so nothing is left behind —
    no SQLite file created (nor held), no PostgreSQL schema made (nor pool left open),
    no loop thread running."""
    import threading

    from statekeeper import ConfigurationError

    from ..backends._services import fresh_url

    def loop_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "statekeeper-langgraph"}

    def schema_exists(schema: str) -> bool:
        import psycopg

        from ..backends._services import POSTGRES_DSN

        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            query = "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s"
            return conn.execute(query, (schema,)).fetchone() is not None

    async def aopen(url: str) -> None:
        await StatekeeperSaver.afrom_url(url, **bad)

    before = loop_threads()
    with fresh_url(engine, tmp_path, "bad.db") as url:
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            if opener == "from_url":
                StatekeeperSaver.from_url(url, **bad)
            else:
                asyncio.run(aopen(url))
        if engine == "sqlite":
            assert list(tmp_path.iterdir()) == []  # no file made, so none held
        else:
            assert not schema_exists(url.rsplit("schema=", 1)[1])
    assert loop_threads() <= before


async def test_an_older_checkpoint_read_again_is_not_replayed_again(api: Api) -> None:
    """Time travel reads the checkpoint it starts from more than once (``get_state``,
    then the run or ``update_state``): the second read of an older checkpoint is served
    from the saver's cache, not by another replay of the stream, and reads back the
    same — also after later checkpoints and writes on the thread."""
    chain = Chain(api)
    await chain.step({"a": "a1", "b": {"big": "x" * 200}})
    await chain.step({"a": "a2"})
    await chain.step({"b": {"big": "y" * 200}})
    older = config(chain.thread_id, checkpoint_id=chain.ids[1])
    await api.put_writes(older, [("a", "pending")], "task-1")
    loads: list[str] = []  # older checkpoints looked up in storage (by their key)
    store_find_key = api.saver.store.find_key

    async def counted(agent_id: str, key: str) -> Any:
        loads.append(key)
        return await store_find_key(agent_id, key)

    api.saver.store.find_key = counted  # type: ignore[method-assign]
    first = await api.get_tuple(older)
    await chain.step({"a": "a4"})  # the thread moves on
    second = await api.get_tuple(older)
    assert first is not None and second is not None
    assert len(loads) == 1
    for got in (first, second):
        assert got.checkpoint["id"] == chain.ids[1]
        assert got.checkpoint["channel_values"] == {"a": "a2", "b": {"big": "x" * 200}}
        assert got.pending_writes == [("task-1", "a", "pending")]
        assert got.parent_config == config(chain.thread_id, "", chain.ids[0])
    assert first.checkpoint == second.checkpoint and first.metadata == second.metadata


# -- fork protection -----------------------------------------------------------------


async def test_fork_protection_refuses_a_second_child(url: str) -> None:
    saver = StatekeeperSaver.from_url(url, fork_protection=True)
    try:
        api = Api(saver, "async")
        chain = Chain(api)
        await chain.step({"a": 1})
        await chain.step({"a": 2})
        cp = checkpoint({"a": 3}, {"a": 3})
        with pytest.raises(CheckpointForkError) as info:
            await api.put(config(chain.thread_id, checkpoint_id=chain.ids[0]), cp, {}, {"a": 3})
        assert isinstance(info.value, ConflictError)
        assert info.value.latest_id == chain.ids[-1] and info.value.parent_id == chain.ids[0]
        assert len(await api.list(config(chain.thread_id))) == 2  # nothing written
        with pytest.raises(CheckpointForkError):
            saver.put(config(chain.thread_id, checkpoint_id=chain.ids[0]), cp, {}, {"a": 3})
        await chain.step({"a": 3})  # the real continuation is fine
    finally:
        saver.close()


async def test_fork_protection_fences_two_writers_on_one_file(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/two.db"
    one = StatekeeperSaver.from_url(url, fork_protection=True)
    two = StatekeeperSaver.from_url(url, fork_protection=True)
    try:
        chain = Chain(Api(one, "sync"))
        await chain.step({"a": 0})
        two.get_tuple(config(chain.thread_id))  # the second writer has read the thread
        parent = config(chain.thread_id, checkpoint_id=chain.ids[0])
        one.put(parent, checkpoint({"a": 1}, {"a": 2}), {}, {"a": 2})
        with pytest.raises(CheckpointForkError):
            two.put(parent, checkpoint({"a": 1}, {"a": 2}), {}, {"a": 2})
        assert len(list(two.list(config(chain.thread_id)))) == 2
    finally:
        one.close()
        two.close()


# -- put_writes ----------------------------------------------------------------------


async def test_put_writes_round_trip_and_order(api: Api) -> None:
    chain = Chain(api)
    saved = await chain.step({"a": 1})
    await api.put_writes(saved, [("x", 1), ("y", {"k": [1, 2]})], "task-b", "~__pregel_pull, b")
    await api.put_writes(saved, [("x", 2)], "task-a", "~__pregel_pull, a")
    got = await api.get_tuple(config(chain.thread_id))
    assert got is not None
    # writes_sort_key: (task_path, task_id, idx)
    assert got.pending_writes == [
        ("task-a", "x", 2),
        ("task-b", "x", 1),
        ("task-b", "y", {"k": [1, 2]}),
    ]


async def test_put_writes_is_insert_or_ignore_per_task_and_index(api: Api) -> None:
    chain = Chain(api)
    saved = await chain.step({"a": 1})
    await api.put_writes(saved, [("x", "first"), ("y", "first")], "t")
    before = len(events(api.saver, chain.thread_id))
    await api.put_writes(saved, [("x", "first"), ("y", "first")], "t")  # retried: no-op
    assert len(events(api.saver, chain.thread_id)) == before
    await api.put_writes(saved, [("x", "second")], "t")  # same (task, idx 0): ignored
    await api.put_writes(saved, [("x", "1"), ("y", "2"), ("z", "third")], "t")  # idx 2 is new
    got = await api.get_tuple(saved)
    assert got is not None
    assert got.pending_writes == [("t", "x", "first"), ("t", "y", "first"), ("t", "z", "third")]


@pytest.mark.parametrize("channel", [ERROR, SCHEDULED, INTERRUPT, RESUME])
async def test_special_writes_replace(api: Api, channel: str) -> None:
    chain = Chain(api)
    saved = await chain.step({"a": 1})
    await api.put_writes(saved, [(channel, "v1")], "t")
    await api.put_writes(saved, [(channel, "v2")], "t")
    await api.put_writes(saved, [("regular", "r")], "t")
    got = await api.get_tuple(saved)
    assert got is not None
    assert sorted(got.pending_writes or []) == sorted([("t", channel, "v2"), ("t", "regular", "r")])
    # the negative index LangGraph assigns keeps it apart from regular index 0
    assert WRITES_IDX_MAP[channel] < 0


async def test_writes_may_arrive_before_their_checkpoint(api: Api) -> None:
    thread = new_thread()
    cp = checkpoint({"a": 1}, {"a": 1})
    await api.put_writes(config(thread, checkpoint_id=cp["id"]), [("a", 2)], "t")
    assert await api.get_tuple(config(thread)) is None
    await api.put(config(thread), cp, {}, {"a": 1})
    got = await api.get_tuple(config(thread))
    assert got is not None and got.pending_writes == [("t", "a", 2)]


async def test_writes_match_in_memory_saver(api: Api) -> None:
    """The same call sequence gives the same pending writes as LangGraph's InMemorySaver."""
    reference = InMemorySaver()
    thread = new_thread()
    cp = checkpoint({"a": 1}, {"a": "1"})
    calls: list[tuple[list[tuple[str, Any]], str, str]] = [
        ([("a", 1), ("b", 2)], "t1", "p1"),
        ([(ERROR, "boom")], "t1", "p1"),
        ([(ERROR, "boom again"), ("a", 5)], "t1", "p1"),
        ([("a", 3), (INTERRUPT, {"q": 1})], "t2", "p0"),
        ([(RESUME, "yes"), ("c", 4)], "t2", "p0"),
        ([("a", 9)], "t1", "p1"),
    ]
    ours = await api.put(config(thread), cp, {}, {"a": "1"})
    theirs = reference.put(config(thread), cp, {}, {"a": "1"})
    for writes, task, path in calls:
        await api.put_writes(ours, writes, task, path)
        reference.put_writes(theirs, writes, task, path)
    got, expected = await api.get_tuple(ours), reference.get_tuple(theirs)
    assert got is not None and expected is not None
    assert got.pending_writes == expected.pending_writes


# -- list ----------------------------------------------------------------------------


async def test_list_filters_before_limit_and_order(api: Api) -> None:
    chain = Chain(api)
    for i in range(6):
        await chain.step({"i": i}, {"source": "input" if i % 2 else "loop", "run_id": f"r{i // 3}"})
    everything = await api.list(config(chain.thread_id))
    assert [t.checkpoint["id"] for t in everything] == chain.ids[::-1]
    assert [t.checkpoint["channel_values"]["i"] for t in everything] == [5, 4, 3, 2, 1, 0]
    inputs = await api.list(config(chain.thread_id), filter={"source": "input"})
    assert [t.metadata["step"] for t in inputs] == [5, 3, 1]
    both = await api.list(config(chain.thread_id), filter={"source": "input", "run_id": "r0"})
    assert [t.metadata["step"] for t in both] == [1]
    before = await api.list(
        config(chain.thread_id), before=config(chain.thread_id, checkpoint_id=chain.ids[3])
    )
    assert [t.checkpoint["id"] for t in before] == chain.ids[2::-1]
    limited = await api.list(config(chain.thread_id), before=chain.configs[4], limit=2)
    assert [t.checkpoint["id"] for t in limited] == [chain.ids[3], chain.ids[2]]
    assert await api.list(config(chain.thread_id), limit=0) == []
    one = await api.list(config(chain.thread_id, checkpoint_id=chain.ids[1]))
    assert [t.checkpoint["id"] for t in one] == [chain.ids[1]]
    assert await api.list(config(chain.thread_id), filter={"source": "nope"}) == []


async def test_list_pending_writes_and_namespaces(api: Api) -> None:
    root = Chain(api)
    child = Chain(api, root.thread_id, "child:x")
    saved = await root.step({"a": 1})
    await child.step({"b": 2})
    await api.put_writes(saved, [("a", 7)], "t")
    listed = await api.list(config(root.thread_id, ""))
    assert len(listed) == 1 and listed[0].pending_writes == [("t", "a", 7)]
    unscoped = await api.list({"configurable": {"thread_id": root.thread_id}})
    assert {t.config["configurable"]["checkpoint_ns"] for t in unscoped} == {"", "child:x"}


async def test_list_all_threads_when_config_is_none(api: Api) -> None:
    first, second = Chain(api), Chain(api)
    await first.step({"a": 1})
    await second.step({"a": 2})
    await second.step({"a": 3})
    threads = {t.config["configurable"]["thread_id"] for t in await api.list(None)}
    assert {first.thread_id, second.thread_id} <= threads
    assert len(await api.list(None, limit=2)) == 2
    mine = await api.list(None, filter={"step": 1})
    assert second.thread_id in {t.config["configurable"]["thread_id"] for t in mine}


# -- delete / copy / prune -----------------------------------------------------------


async def test_delete_thread(api: Api) -> None:
    gone, kept = Chain(api), Chain(api)
    saved = await gone.step({"a": 1})
    await Chain(api, gone.thread_id, "child").step({"c": 1})
    await api.put_writes(saved, [("a", 2)], "t")
    await kept.step({"a": 1})
    await api.delete_thread(gone.thread_id)
    assert await api.get_tuple(config(gone.thread_id)) is None
    assert await api.list({"configurable": {"thread_id": gone.thread_id}}) == []
    assert await api.get_tuple(config(kept.thread_id)) is not None
    await api.delete_thread(new_thread())  # unknown thread: no error
    again = Chain(api, gone.thread_id)  # the thread can start over
    await again.step({"a": "new"})
    got = await api.get_tuple(config(gone.thread_id))
    assert (
        got is not None
        and got.pending_writes == []
        and got.checkpoint["channel_values"] == {"a": "new"}
    )


async def test_delete_for_runs(api: Api) -> None:
    chain = Chain(api)
    await chain.step({"a": 1}, {"run_id": "run-1"})
    saved = await chain.step({"a": 2}, {"run_id": "run-2"})
    await chain.step({"a": 3}, {"run_id": "run-1"})
    await api.put_writes(saved, [("a", 9)], "t")
    await api.delete_for_runs(["run-1"])
    left = await api.list(config(chain.thread_id))
    assert [t.metadata["run_id"] for t in left] == ["run-2"]
    assert left[0].checkpoint["channel_values"] == {"a": 2}
    assert left[0].pending_writes == [("t", "a", 9)]
    await api.delete_for_runs([])
    await api.delete_for_runs(["no-such-run"])
    assert len(await api.list(config(chain.thread_id))) == 1


async def test_copy_thread(api: Api) -> None:
    source = Chain(api)
    await source.step({"m": [HumanMessage("one", id="1")]})
    saved = await source.step({"m": [HumanMessage("one", id="1"), AIMessage("two" * 40, id="2")]})
    await Chain(api, source.thread_id, "child").step({"c": True})
    await api.put_writes(saved, [("m", [AIMessage("three", id="3")])], "t", "p")
    target = new_thread()
    await api.copy_thread(source.thread_id, target)
    src = await api.list({"configurable": {"thread_id": source.thread_id}})
    dst = await api.list({"configurable": {"thread_id": target}})
    assert len(src) == len(dst) == 3
    for s, d in zip(src, dst, strict=True):
        assert s.checkpoint == d.checkpoint
        assert s.metadata == d.metadata
        assert s.pending_writes == d.pending_writes
        assert d.config["configurable"]["thread_id"] == target
    await api.copy_thread(new_thread(), new_thread())  # nothing to copy: no error


async def test_prune_keep_latest_and_delete(api: Api) -> None:
    chain = Chain(api)
    for i in range(4):
        saved = await chain.step({"i": i, "msgs": [AIMessage("pooled message " * 10, id="x")]})
    child = Chain(api, chain.thread_id, "child")
    await child.step({"c": 1})
    await child.step({"c": 2})
    await api.put_writes(saved, [("i", 99)], "t")
    other = Chain(api)
    await other.step({"o": 1})
    await other.step({"o": 2})
    await api.prune([chain.thread_id], "keep_latest")
    left = await api.list({"configurable": {"thread_id": chain.thread_id}})
    assert sorted(t.checkpoint["id"] for t in left) == sorted([chain.ids[-1], child.ids[-1]])
    latest = await api.get_tuple(config(chain.thread_id))
    assert latest is not None
    assert latest.checkpoint["channel_values"]["i"] == 3
    assert latest.pending_writes == [("t", "i", 99)]
    assert len(await api.list(config(other.thread_id))) == 2  # untouched
    await chain.step({"i": 4})  # the thread goes on after the rewrite
    assert (await api.get_tuple(config(chain.thread_id))).checkpoint["channel_values"]["i"] == 4  # type: ignore[union-attr]
    await api.prune([chain.thread_id, other.thread_id], "delete")
    assert await api.list({"configurable": {"thread_id": chain.thread_id}}) == []
    assert await api.list(config(other.thread_id)) == []
    await api.prune([], "keep_latest")
    with pytest.raises(ValueError):
        await api.prune([chain.thread_id], "sideways")


async def test_prune_retention_keep_last_and_ttl(api: Api) -> None:
    chain = Chain(api)
    for i in range(5):
        await chain.step({"i": i})
    report = await api.prune_retention([chain.thread_id], keep_last=2, dry_run=True)
    assert report.checkpoints_deleted == 3 and report.dry_run
    assert len(await api.list(config(chain.thread_id))) == 5
    report = await api.prune_retention([chain.thread_id], keep_last=2)
    assert report.checkpoints_deleted == 3 and report.threads_compacted == 1
    assert [
        t.checkpoint["channel_values"]["i"] for t in await api.list(config(chain.thread_id))
    ] == [4, 3]
    # ttl: nothing is old yet; an hour later everything but the newest expires... and
    # the thread as a whole expires once its newest checkpoint is older than the ttl
    assert (await api.prune_retention([chain.thread_id], ttl=3600)).checkpoints_deleted == 0
    now = time.time()
    report = await api.prune_retention([chain.thread_id], ttl=60, now=now + 30)
    assert report.checkpoints_deleted == 0
    report = await api.prune_retention(None, ttl=60, now=now + 3600)
    assert report.threads_deleted >= 1
    assert await api.get_tuple(config(chain.thread_id)) is None


async def test_ttl_keeps_the_newest_checkpoint_of_an_active_thread(api: Api) -> None:
    chain = Chain(api)
    await chain.step({"i": 0})
    await chain.step({"i": 1})
    mid = time.time()  # checkpoints 0 and 1 are stamped at or before this (ms resolution)
    while True:  # a clock condition: checkpoint 2 is stamped later than the cut
        if time.time() > mid + 0.002:
            break
        await asyncio.sleep(0.001)
    await chain.step({"i": 2})
    # "now" is exactly 1 s after the cut, however long the machine took to get here
    report = await api.prune_retention([chain.thread_id], ttl=1.0, now=mid + 0.001 + 1.0)
    assert report.checkpoints_deleted == 2
    assert [
        t.checkpoint["channel_values"]["i"] for t in await api.list(config(chain.thread_id))
    ] == [2]


async def test_get_next_version(saver: StatekeeperSaver) -> None:
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(1, None) == 2
    v = saver.get_next_version("00000000000000000000000000000007.0.123", None)
    assert (
        isinstance(v, str)
        and v > "00000000000000000000000000000007.9"
        and v.startswith("0" * 31 + "8")
    )


# -- sync/async plumbing -------------------------------------------------------------


async def test_sync_methods_work_inside_a_running_loop(saver: StatekeeperSaver) -> None:
    thread = new_thread()
    cp = checkpoint({"a": 1}, {"a": 1})
    saver.put(config(thread), cp, {}, {"a": 1})  # called from a coroutine: no deadlock
    assert (await saver.aget_tuple(config(thread))) is not None
    assert saver.get_tuple(config(thread)) is not None


def test_sync_methods_from_many_threads(saver: StatekeeperSaver) -> None:
    from concurrent.futures import ThreadPoolExecutor

    thread = new_thread()
    cp = checkpoint({"a": 1}, {"a": 1})
    saved = saver.put(config(thread), cp, {}, {"a": 1})
    workers = 8
    held: list[bool] = []

    async def hold_first() -> None:
        # The first commit is held until the other workers' writes are queued behind
        # it (a condition, not a duration): they must then share the next commit.
        if not held:
            held.append(True)
            for _ in range(1_000_000):
                queued = sum(len(q) for q in saver._queued.values())
                if queued >= workers - 1:
                    break
                await asyncio.sleep(0)
            else:
                raise AssertionError(f"only {queued} writes queued behind the first commit")

    commit = saver._commit

    async def first_commit_waits(thread_id: str, batch: Any) -> None:
        await hold_first()  # (a lone write too: a batch of one)
        await commit(thread_id, batch)

    saver._commit = first_commit_waits  # type: ignore[method-assign]

    def write(i: int) -> None:
        saver.put_writes(saved, [("w", i)], f"task-{i}")

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, range(40)))
    got = saver.get_tuple(saved)
    assert got is not None and len(got.pending_writes or []) == 40
    assert sorted(w[2] for w in got.pending_writes or []) == list(range(40))
    # writes that queue up behind a commit share the next one
    written = events(saver, thread)
    assert len(written) <= 1 + 1 + 40 - (workers - 1) + 1
    assert any(e.type == "lg.w" and len(e.ops) >= workers - 1 for e in written)


async def test_coalesced_batches_keep_one_checkpoint_per_event(saver: StatekeeperSaver) -> None:
    api = Api(saver, "async")
    chain = Chain(api)
    await chain.step({"a": 0})
    cps = [checkpoint({"a": i}, {"a": i + 1}) for i in range(1, 4)]

    async def put(i: int) -> None:
        parent = chain.ids[0] if i == 0 else cps[i - 1]["id"]
        await api.put(config(chain.thread_id, checkpoint_id=parent), cps[i], {"i": i}, {"a": i + 2})

    await asyncio.gather(
        *(put(i) for i in range(3)), api.put_writes(chain.configs[0], [("x", 1)], "t")
    )
    for i, cp in enumerate(cps):
        got = await api.get_tuple(config(chain.thread_id, checkpoint_id=cp["id"]))
        assert got is not None and got.checkpoint["channel_values"] == {"a": i + 1}
        assert got.metadata == {"i": i}
    assert all(
        sum(op["path"].endswith("/cp/h") or op["path"] == "/ns/" for op in e.ops) <= 1
        for e in events(saver, chain.thread_id)
    )


async def test_saver_on_a_given_store(tmp_path: Any) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/given.db")
    saver = StatekeeperSaver(store)
    api = Api(saver, "async")
    chain = Chain(api)
    await chain.step({"a": 1})
    assert (await api.get_tuple(config(chain.thread_id))) is not None
    await saver.aclose()  # the saver does not close a store it was given
    assert await store.head(f"lg/{chain.thread_id}#0") == 2
    await store.close()


async def test_with_allowlist_clone_shares_the_store(saver: StatekeeperSaver) -> None:
    class Custom:
        pass

    clone = saver.with_allowlist([(Custom.__module__, Custom.__name__)])
    thread = new_thread()
    clone.put(config(thread), checkpoint({"a": 1}, {"a": 1}), {}, {"a": 1})
    assert saver.get_tuple(config(thread)) is not None


async def test_other_processes_writes_are_seen(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    one, two = StatekeeperSaver.from_url(url), StatekeeperSaver.from_url(url)
    try:
        chain = Chain(Api(one, "sync"))
        await chain.step({"a": 1})
        assert two.get_tuple(config(chain.thread_id)) is not None  # cached in two now
        await chain.step({"a": 2})
        got = two.get_tuple(config(chain.thread_id))
        assert got is not None and got.checkpoint["channel_values"] == {"a": 2}
        two.put_writes(chain.configs[-1], [("x", 1)], "t")
        got = one.get_tuple(config(chain.thread_id))
        assert got is not None and got.pending_writes == [("t", "x", 1)]
    finally:
        one.close()
        two.close()


async def test_adaptive_snapshots_keep_loads_short(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/snap.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url, snapshot_min_bytes=2048) as saver:
        chain = Chain(Api(saver, "sync"), thread)
        messages: list[Any] = []
        for i in range(40):
            messages = [*messages, AIMessage(f"turn {i} " + "w" * 200, id=f"m{i}")]
            await chain.step({"messages": messages})
        agent = f"lg/{thread}#0"
        snap = saver._portal.call(saver.store.backend.latest_snapshot(agent))
        assert snap is not None and snap.seq > 20
        seqs = []
        below = None
        while (
            found := saver._portal.call(saver.store.backend.latest_snapshot(agent, below))
        ) is not None:
            seqs.append(found.seq)
            below = found.seq - 1
        assert 2 <= len(seqs) <= 8  # geometric, not one per N events
    with StatekeeperSaver.from_url(url) as cold:  # a new process reads from the snapshot
        got = cold.get_tuple(config(thread))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
        old = cold.get_tuple(config(thread, checkpoint_id=chain.ids[5]))
        assert old is not None and old.checkpoint["channel_values"]["messages"] == messages[:6]


_WORDS = [
    "state",
    "graph",
    "node",
    "edge",
    "message",
    "thread",
    "checkpoint",
    "replay",
    "agent",
    "tool",
    "answer",
    "plan",
]


async def test_snapshots_are_compressed_and_bound_a_cold_reads_replay(tmp_path: Any) -> None:
    """A thread's snapshots are stored compressed (``from_url``'s store), and one is
    taken once the events since the last one are as many stored bytes as it is: a new
    saver's first read replays at most about one snapshot's worth of event bytes."""
    url = f"sqlite:///{tmp_path}/replay.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url, snapshot_min_bytes=4096) as saver:
        chain = Chain(Api(saver, "sync"), thread)
        messages: list[Any] = []
        for i in range(150):
            rng = random.Random(i)
            text = " ".join(rng.choice(_WORDS) for _ in range(50))
            messages = [*messages, AIMessage(text, id=f"m{i}")]
            await chain.step({"messages": messages})
        agent = f"lg/{thread}#0"
        backend = saver.store.backend
        snap = saver._portal.call(backend.latest_snapshot(agent))
        assert snap is not None
        assert snap.payload[1] & 0x0C == 0x08  # zstd with the codec's built-in dictionary
        after = saver._portal.call(backend.read(agent, snap.seq, None))
        # each event's payload is its ops plus a fixed header and envelope (< 64 bytes)
        replayed = sum(len(raw.payload) - 64 for raw in after)
        assert replayed <= max(4096, len(snap.payload) * 5 // 4)
        doc = saver._portal.call(saver.store.load(agent)).data
        assert len(snap.payload) < len(orjson.dumps(doc)) // 2  # compressed, not whole
        # checkpoint events (a message and the header: > 512 bytes) are compressed too
        events = saver._portal.call(backend.read(agent, 0, None))
        puts = [raw for raw in events if raw.type == "lg.cp"]
        assert len(puts) == 150 and all(raw.payload[1] & 0x0C == 0x08 for raw in puts)
        saver.put_writes(chain.configs[-1], [("x", 1)], "t")  # a short write: compressed too
        head = saver._portal.call(backend.read(agent, events[-1].seq, None))
        assert [raw.payload[1] & 0x0C for raw in head] == [0x08]
    # a saver whose store does not compress reads them, and writes plain records
    with StatekeeperSaver.from_url(url, compression=None) as cold:
        got = cold.get_tuple(config(thread))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
        old = cold.get_tuple(config(thread, checkpoint_id=chain.ids[70]))
        assert old is not None and old.checkpoint["channel_values"]["messages"] == messages[:71]
        messages = [*messages, AIMessage(" ".join(_WORDS * 8), id="last")]
        chain.api = Api(cold, "sync")
        await chain.step({"messages": messages})
        last = cold._portal.call(cold.store.backend.read(agent, head[-1].seq, None))
        assert [raw.payload[1] & 0x0C for raw in last] == [0]


async def test_listing_all_threads_ignores_other_agents(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/mixed.db"
    with StatekeeperSaver.from_url(url) as saver:
        saver._portal.call(saver.store.save("agent-not-langgraph", {"x": 1}))
        saver._portal.call(saver.store.save("zz-other", {"x": 1}))
        chain = Chain(Api(saver, "sync"))
        await chain.step({"a": 1})
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == [
            chain.thread_id
        ]


def test_latest_read_hands_out_copies_that_cannot_change_the_stored_state(url: str) -> None:
    """The messages of the latest checkpoint are built once and handed out as copies:
    each read gets its own objects, and changing one (a field, or a container in
    place) changes neither the stored state nor what the next read returns."""
    from ._lg_graphs import chat_graph

    with StatekeeperSaver.from_url(url) as saver:
        graph = chat_graph(steps=2).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": new_thread()}}
        graph.invoke({"messages": [HumanMessage("hi", id="h")], "turn": 0}, cfg)
        first = saver.get_tuple(cfg)
        second = saver.get_tuple(cfg)
        assert first is not None and second is not None
        one, two = first.checkpoint["channel_values"], second.checkpoint["channel_values"]
        assert one == two
        assert all(a is not b for a, b in zip(one["messages"], two["messages"], strict=True))
        one["messages"][0].content = "edited"
        one["messages"][1].additional_kwargs["leak"] = True
        third = saver.get_tuple(cfg)
        assert third is not None
        assert third.checkpoint["channel_values"] == two
        assert third.checkpoint["channel_values"]["messages"][1].additional_kwargs == {}
        assert graph.get_state(cfg).values["messages"] == two["messages"]
        # an older checkpoint's read reuses those messages the same way
        older = next(
            h.config for h in graph.get_state_history(cfg) if len(h.values["messages"]) == 2
        )
        a, b = saver.get_tuple(older), saver.get_tuple(older)
        assert a is not None and b is not None
        msgs_a = a.checkpoint["channel_values"]["messages"]
        msgs_b = b.checkpoint["channel_values"]["messages"]
        assert msgs_a == msgs_b == two["messages"][:2]
        assert all(x is not y for x, y in zip(msgs_a, msgs_b, strict=True))
        msgs_a[0].additional_kwargs["leak"] = True
        c = saver.get_tuple(older)
        assert c is not None and c.checkpoint["channel_values"]["messages"] == msgs_b


def test_a_first_read_hands_out_what_it_built(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new saver's first read of a thread builds each message once and hands those
    objects out (no copy made of them); the next read makes new ones from the stored
    fields (no copy either), and a change made to the first read's objects reaches
    neither it nor the stored state."""
    from langchain_core.messages import BaseMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " + "x" * 200, id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    url = f"sqlite:///{tmp_path}/first.db"
    cfg = {"configurable": {"thread_id": new_thread()}}
    with StatekeeperSaver.from_url(url) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(2):  # messages big enough to be pooled (and cached built)
            graph.invoke({"messages": [HumanMessage(f"hi {turn} " + "y" * 200)]}, cfg)
        stored = graph.get_state(cfg).values["messages"]
    copies: list[Any] = []
    model_copy = BaseMessage.model_copy

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        copies.append(self)
        return model_copy(self, *args, **kwargs)

    monkeypatch.setattr(BaseMessage, "model_copy", counted)
    with StatekeeperSaver.from_url(url) as saver:
        first = saver.get_tuple(cfg)
        assert first is not None and copies == []
        one = first.checkpoint["channel_values"]["messages"]
        assert one == stored
        second = saver.get_tuple(cfg)
        assert second is not None and copies == []
        two = second.checkpoint["channel_values"]["messages"]
        assert two == stored and all(a is not b for a, b in zip(one, two, strict=True))
        one[0].content = "edited"
        one[1].additional_kwargs["leak"] = True
        third = saver.get_tuple(cfg)
        assert third is not None and third.checkpoint["channel_values"]["messages"] == stored
        assert builder.compile(checkpointer=saver).get_state(cfg).values["messages"] == stored


def test_built_message_cache_is_bounded_in_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The messages kept built for the threads read last stay within the byte budget
    (plus the thread being read), however many large messages those threads hold."""
    from langgraph.graph import START, MessagesState, StateGraph

    from statekeeper.integrations.langgraph import reads as saver_reads

    budget = 64 * 1024
    monkeypatch.setattr(saver_reads, "_BUILT_BYTES", budget)
    big = "x" * 20_000

    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])} {big}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/b.db") as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(3):
            for t in range(5):
                cfg: Any = {"configurable": {"thread_id": f"big-{t}"}}
                graph.invoke({"messages": [HumanMessage(f"q {turn} {big}")]}, cfg)
                held = {
                    tid: sum(len(hit[0].content) for hit in st.built.cache.values())
                    for tid, st in saver._built.items()
                    if st.built is not None
                }
                if turn == 0:
                    continue  # a new thread's first read finds no checkpoint to build
                latest = next(reversed(saver._built))
                others = sum(n for tid, n in held.items() if tid != latest)
                assert others <= budget, (turn, t, held)
                assert len(held) <= saver_reads._BUILT_THREADS
        # and the cache still serves reads: the latest state is intact, ids kept
        last = graph.get_state({"configurable": {"thread_id": "big-4"}}).values["messages"]
        assert len(last) == 6 and all(m.id is not None for m in last)


def test_a_write_batched_with_a_refused_one_is_applied_once(url: str) -> None:
    """Writes to a thread queued while it commits share the next commit, each planned
    on the document as the ones before it leave it. When one of them is refused (e.g.
    a concurrent run's write, by fork protection) the others are stored and the
    saver's document is what was stored: they were applied a second time, and a
    checkpoint whose ops remove a channel value failed with ``PatchError`` after it
    was stored (seen when a run lost a race to another)."""
    saver = StatekeeperSaver.from_url(url)
    thread = new_thread()

    def refused(st: Any) -> Any:
        raise ValueError("refused")

    def removes(st: Any) -> Any:
        return "lg.run", [{"op": "remove", "path": "/probe"}], None

    async def scenario() -> tuple[Any, Any]:
        add = [{"op": "add", "path": "/probe", "value": 1}]
        await saver._mutate(thread, lambda st: ("lg.run", add, None), "lg.run")
        async with saver._lock(thread):  # both queue up behind a commit in progress
            first = asyncio.ensure_future(saver._mutate(thread, refused, "lg.run"))
            second = asyncio.ensure_future(saver._mutate(thread, removes, "lg.run"))
            await asyncio.sleep(0)  # one loop pass: each task runs up to the lock
            assert len(saver._queued[thread]) == 2
        with pytest.raises(ValueError, match="refused"):
            await first
        await second
        stored = await saver.store.get(saver._streams[thread].agent_id)
        return stored.data if stored is not None else None, saver._streams[thread].doc

    try:
        stored, cached = saver._portal.call(scenario())
        assert stored is not None and "probe" not in stored
        assert cached == stored
    finally:
        saver.close()
