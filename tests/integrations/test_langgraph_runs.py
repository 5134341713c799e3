"""Fork protection per run (the default): one LangGraph run holds a thread at a time.

A run claims its thread in ``get_tuple`` at its start and releases it when its loop
exits; a run that loses fails there, before any node ran and with nothing written.
Forks the caller asks for (time travel, ``update_state`` on a named checkpoint) pass.
Every test runs on memory, SQLite, PostgreSQL and Redis; no test waits for a duration:
nodes block on conditions the test sets.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from statekeeper.integrations.langgraph import (
    CheckpointForkError,
    StatekeeperSaver,
    ThreadBusyError,
)

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)
from ..conftest import FakeClock
from .conftest import new_thread

#: a guard against a deadlocked test, never a synchronisation
GUARD = 120.0


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def run_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    name = request.param
    if name == "memory":
        yield "memory://"
    elif name == "sqlite":
        yield f"sqlite:///{tmp_path}/runs.db"
    elif name == "postgresql":
        require_postgres()
        schema = namespace(tmp_path, "sk_lgr_")
        try:
            yield f"{POSTGRES_DSN}?schema={schema}"
        finally:
            drop_schema(schema)
    else:
        require_redis()
        prefix = namespace(tmp_path, "sk_lgr_") + ":"
        try:
            yield f"{REDIS_URL}?prefix={prefix}"
        finally:
            delete_prefix(prefix)


def savers(url: str, count: int, **options: Any) -> list[StatekeeperSaver]:
    """``count`` savers on one store (separate caches and loops, as separate processes
    have); one for ``memory://``, whose stores are not shared."""
    return [
        StatekeeperSaver.from_url(url, **options) for _ in range(1 if url == "memory://" else count)
    ]


class Gate:
    """Counts the runs of a round that entered the node and the ones that failed; the
    node waits until every run of the round did one or the other."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.size = 0
        self.entered = 0
        self.failed = 0

    def reset(self, size: int) -> None:
        with self.cond:
            self.size, self.entered, self.failed = size, 0, 0

    def enter_and_wait(self) -> None:
        with self.cond:
            self.entered += 1
            self.cond.notify_all()
            done = self.cond.wait_for(lambda: self.entered + self.failed >= self.size, GUARD)
        assert done, "the round never settled"

    def fail(self) -> None:
        with self.cond:
            self.failed += 1
            self.cond.notify_all()


def reply_graph(node: Callable[[], None]) -> StateGraph[Any]:
    """A chat: one node that answers the last human message (after calling ``node``)."""

    def reply(state: MessagesState) -> dict[str, Any]:
        node()
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def whole_turns(messages: list[AnyMessage]) -> list[str]:
    """The human messages of a chat, asserting each is followed by its own reply."""
    assert len(messages) % 2 == 0, [m.content for m in messages]
    asked = []
    for human, ai in zip(messages[::2], messages[1::2], strict=True):
        assert isinstance(human, HumanMessage) and isinstance(ai, AIMessage)
        assert ai.content == f"re: {human.content}"
        asked.append(str(human.content))
    return asked


@pytest.mark.parametrize("durability", [None, "sync"])
def test_concurrent_runs_on_one_thread_leave_only_whole_turns(
    run_url: str, durability: str | None
) -> None:
    """24 runs in rounds of 8 started together on one thread, through two savers: in
    each round exactly one runs (the others fail with ThreadBusyError before their node
    runs), and every checkpoint of the thread holds whole turns only. With
    ``durability="sync"`` the claim rides on the run's input checkpoint (no commit of
    its own): still no losing run's node runs."""
    options = {} if durability is None else {"durability": durability}
    rounds, per_round = 3, 8
    gate = Gate()
    pool = savers(run_url, 2)
    graphs = [reply_graph(gate.enter_and_wait).compile(checkpointer=s) for s in pool]
    thread = new_thread()
    cfg = {"configurable": {"thread_id": thread}}
    winners: list[str] = []
    try:
        for r in range(rounds):
            gate.reset(per_round)
            start = threading.Barrier(per_round)
            outcome: dict[int, Any] = {}

            def attempt(
                i: int,
                r: int = r,
                start: threading.Barrier = start,
                outcome: dict[int, Any] = outcome,
            ) -> None:
                text = f"round {r} run {i}"
                start.wait(GUARD)
                try:
                    graphs[i % len(graphs)].invoke(
                        {"messages": [HumanMessage(text, id=f"h-{r}-{i}")]}, cfg, **options
                    )
                    outcome[i] = text
                except ThreadBusyError as exc:
                    outcome[i] = exc
                    gate.fail()
                except BaseException as exc:  # reported below
                    outcome[i] = exc
                    gate.fail()

            workers = [threading.Thread(target=attempt, args=(i,)) for i in range(per_round)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(GUARD)
            won = [v for v in outcome.values() if isinstance(v, str)]
            lost = [v for v in outcome.values() if not isinstance(v, str)]
            assert len(won) == 1, outcome
            assert all(isinstance(e, ThreadBusyError) and not e.lost for e in lost), lost
            assert gate.entered == 1  # no losing run's node ran
            winners.extend(won)
        # every stored checkpoint: whole turns of winners, plus at most the input of
        # the turn it was taken in (a winner's message, not yet answered)
        state = graphs[0].get_state(cfg)
        assert whole_turns(state.values["messages"]) == winners
        for snap in graphs[-1].get_state_history(cfg):
            msgs = snap.values.get("messages", [])
            if len(msgs) % 2:  # taken inside a turn: its input is a winner's
                assert msgs[-1].content == winners[len(msgs) // 2]
                msgs = msgs[:-1]
            assert whole_turns(msgs) == winners[: len(msgs) // 2]
    finally:
        for s in pool:
            s.close()


def test_a_write_from_outside_the_run_is_refused_while_it_runs(run_url: str) -> None:
    """``update_state`` while a run is in its node fails with nothing written; the run
    finishes its turn, and the update then passes."""
    entered, go = threading.Event(), threading.Event()

    def node() -> None:
        entered.set()
        assert go.wait(GUARD)

    pool = savers(run_url, 2)
    graph = reply_graph(node).compile(checkpointer=pool[0])
    other = reply_graph(lambda: None).compile(checkpointer=pool[-1])
    cfg = {"configurable": {"thread_id": new_thread()}}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            # sync: what the run stored before its node is durable when the node starts
            graph.invoke({"messages": [HumanMessage("hi", id="h1")]}, cfg, durability="sync")
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert entered.wait(GUARD)
        before = len(list(other.get_state_history(cfg)))
        with pytest.raises(ThreadBusyError) as info:
            other.update_state(cfg, {"messages": [HumanMessage("sneak", id="s")]})
        assert not info.value.lost and info.value.expires_at is not None
        assert "held by another run" in str(info.value)
        with pytest.raises(ThreadBusyError):  # a second run is refused too
            other.invoke({"messages": [HumanMessage("again", id="h2")]}, cfg)
        assert len(list(other.get_state_history(cfg))) == before
        go.set()
        worker.join(GUARD)
        assert not errors
        assert whole_turns(other.get_state(cfg).values["messages"]) == ["hi"]
        other.update_state(cfg, {"messages": [HumanMessage("note", id="n")]})  # free again
    finally:
        go.set()
        worker.join(GUARD)
        for s in pool:
            s.close()


def time_travel(saver: Any) -> list[Any]:
    """``update_state`` on a named checkpoint, ``invoke(None, config)`` from an older
    checkpoint, and ``Command(resume=...)`` at an older interrupted checkpoint; returns
    what a user sees after each step."""

    def contents(messages: list[AnyMessage]) -> list[str]:
        return [str(m.content) for m in messages]

    seen: list[Any] = []
    graph = reply_graph(lambda: None).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": new_thread()}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, cfg)
    history = list(graph.get_state_history(cfg))
    named = next(  # turn two's input checkpoint
        h
        for h in history
        if len(h.values.get("messages", [])) == 2 and (h.metadata or {}).get("source") == "input"
    )
    branch = graph.update_state(
        named.config, {"messages": [HumanMessage("b", id="hb")]}, as_node=START
    )
    seen.append(
        graph.get_state(cfg).config["configurable"]["checkpoint_id"]
        == (branch["configurable"]["checkpoint_id"])
    )
    seen.append(contents(graph.invoke(None, branch)["messages"]))
    seen.append(contents(graph.invoke(None, named.config)["messages"]))
    seen.append(contents(graph.get_state(cfg).values["messages"]))
    seen.append(len(list(graph.get_state_history(cfg))) - len(history))

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("name?")
        return {"messages": [AIMessage(f"hello {answer}", id=f"ai-{answer}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    hitl = builder.compile(checkpointer=saver)
    cfg2 = {"configurable": {"thread_id": new_thread()}}
    hitl.invoke({"messages": [HumanMessage("hi", id="x")]}, cfg2)
    paused = hitl.get_state(cfg2)
    seen.append(paused.next)
    seen.append(contents(hitl.invoke(Command(resume="ann"), cfg2)["messages"]))
    seen.append(contents(hitl.invoke(Command(resume="bob"), paused.config)["messages"]))
    seen.append(contents(hitl.invoke(None, paused.config)["messages"]))
    seen.append(contents(hitl.get_state(cfg2).values["messages"]))
    seen.append(len(list(hitl.get_state_history(cfg2))))
    return seen


def test_explicit_time_travel_passes(run_url: str) -> None:
    """With the default protection, the forks a caller asks for pass and behave exactly
    as on LangGraph's own ``InMemorySaver``."""
    with StatekeeperSaver.from_url(run_url) as saver:
        got = time_travel(saver)
    assert got == time_travel(InMemorySaver())
    assert got[0] is True and got[1][-2:] == ["b", "re: b"]


def test_an_update_on_a_stale_latest_is_refused(run_url: str) -> None:
    """``update_state`` without a checkpoint id reads the latest checkpoint; when another
    writer moves the thread on before the update is stored, the update is refused
    (a race, not a fork anyone asked for) and nothing is written."""
    if run_url == "memory://":
        pytest.skip("needs two savers on one store")
    moving = StatekeeperSaver.from_url(run_url)
    mover = reply_graph(lambda: None).compile(checkpointer=moving)
    cfg = {"configurable": {"thread_id": new_thread()}}
    mover.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg)

    class Racing(StatekeeperSaver):
        """Another writer finishes a turn right after this saver read the thread."""

        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            mover.invoke({"messages": [HumanMessage("two", id="h2")]}, cfg)
            return found

    racing = Racing.from_url(run_url)
    try:
        stale = reply_graph(lambda: None).compile(checkpointer=racing)
        with pytest.raises(CheckpointForkError) as info:
            stale.update_state(cfg, {"messages": [HumanMessage("late", id="late")]})
        assert not isinstance(info.value, ThreadBusyError)
        assert whole_turns(mover.get_state(cfg).values["messages"]) == ["one", "two"]
    finally:
        racing.close()
        moving.close()


def test_a_lapsed_claim_is_taken_over_and_its_run_fenced(run_url: str) -> None:
    """Crash recovery: a run whose claim lapsed (its process hung or died) no longer
    holds the thread; another run takes it, and the old run's next write is refused
    (``lost``). The holder's live claims are renewed before they lapse."""
    if run_url == "memory://":
        pytest.skip("needs two savers on one store")
    clock = FakeClock(time.time())
    entered, go = threading.Event(), threading.Event()

    def node() -> None:
        entered.set()
        assert go.wait(GUARD)

    # the lease is long in real time: the holder's own renewer (every lease/3 of real
    # time) must not renew during the test, which moves the fake clock by hand
    holder = StatekeeperSaver.from_url(run_url, clock=clock, run_lease=3600)
    taker = StatekeeperSaver.from_url(run_url, clock=clock, run_lease=3600)
    slow = reply_graph(node).compile(checkpointer=holder)
    fast = reply_graph(lambda: None).compile(checkpointer=taker)
    cfg = {"configurable": {"thread_id": new_thread()}}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            slow.invoke({"messages": [HumanMessage("slow", id="h-slow")]}, cfg)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert entered.wait(GUARD)
        # the slow run's input checkpoint is written in the background beside its node:
        # wait until it is stored (a takeover before that would fence it away)
        deadline = time.monotonic() + GUARD
        while not (
            (stored := holder.get_tuple(cfg)) is not None
            and [m.content for m in stored.checkpoint["channel_values"].get("messages", [])]
            == ["slow"]
        ):
            assert time.monotonic() < deadline, "the slow run's input was never stored"
            time.sleep(0.01)
        clock.now += 2400
        holder._portal.call(holder._renew())  # what its renewer does every lease/3
        clock.now += 2400  # 4800 s after the claim, 2400 s after the renewal: still held
        with pytest.raises(ThreadBusyError):
            fast.invoke({"messages": [HumanMessage("fast", id="h-fast")]}, cfg)
        clock.now += 1201  # lapsed
        fast.invoke({"messages": [HumanMessage("fast", id="h-fast")]}, cfg)
    finally:
        go.set()
        worker.join(GUARD)
    try:
        assert len(errors) == 1 and isinstance(errors[0], ThreadBusyError), errors
        assert errors[0].lost and "no longer holds" in str(errors[0])
        # the slow run's input was stored before it hung (as with any saver after a
        # crash); its reply was not, and the taker's turn is whole
        msgs = fast.get_state(cfg).values["messages"]
        assert [m.content for m in msgs] == ["slow", "fast", "re: fast"]
    finally:
        holder.close()
        taker.close()


async def test_concurrent_async_runs(run_url: str) -> None:
    """``ainvoke`` from one event loop: of 8 concurrent runs on one thread one runs."""
    others_failed = asyncio.Event()
    failures = 0
    size = 8

    async def reply(state: MessagesState) -> dict[str, Any]:
        await asyncio.wait_for(others_failed.wait(), GUARD)
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    async with StatekeeperSaver.from_url(run_url) as saver:
        graph = builder.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": new_thread()}}

        async def attempt(i: int) -> str | None:
            nonlocal failures
            try:
                await graph.ainvoke({"messages": [HumanMessage(f"run {i}", id=f"h{i}")]}, cfg)
                return f"run {i}"
            except ThreadBusyError:
                failures += 1
                if failures == size - 1:
                    others_failed.set()
                return None

        done = await asyncio.wait_for(asyncio.gather(*(attempt(i) for i in range(size))), GUARD)
        won = [d for d in done if d is not None]
        assert len(won) == 1 and failures == size - 1
        state = await graph.aget_state(cfg)
        assert whole_turns(state.values["messages"]) == won
        # released at the end of the run: the next run passes
        await graph.ainvoke({"messages": [HumanMessage("next", id="hn")]}, cfg)


@pytest.mark.parametrize("protect", [True, False])
def test_a_run_claims_and_releases_its_thread(tmp_path: Path, protect: bool) -> None:
    """A run stores its claim first and clears it last; with protection off, nothing."""
    url = f"sqlite:///{tmp_path}/claims.db"
    with StatekeeperSaver.from_url(url, fork_protection=protect) as saver:
        graph = reply_graph(lambda: None).compile(checkpointer=saver)
        thread = new_thread()
        cfg = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [HumanMessage("hi", id="h")]}, cfg)

        async def events() -> list[Any]:
            return [e async for e in saver.store.history(f"lg/{thread}#0")]

        kinds = [e.type for e in saver._portal.call(events())]
    if not protect:
        assert "lg.run" not in kinds
        return
    assert kinds[1] == "lg.run" and kinds[-1] == "lg.run", kinds
    assert kinds.count("lg.run") == 2


class HeadReads:
    """Counts the saver's reads of a stream's head (``store.head``)."""

    def __init__(self, saver: StatekeeperSaver) -> None:
        self.count = 0
        head = saver.store.head

        async def counted(agent_id: str) -> int:
            self.count += 1
            return await head(agent_id)

        saver.store.head = counted  # type: ignore[method-assign]


def test_a_run_reads_no_head_and_a_stale_cache_loses_its_append(run_url: str) -> None:
    """A run's writes and its first read are made on the saver's cached document with no
    read of the stream's head first: the compare-and-append is the check. When another
    saver wrote the thread meanwhile, the stale claim loses that append, is planned
    again on a fresh read, and the run goes on from the other saver's turn."""
    thread = new_thread()
    cfg = {"configurable": {"thread_id": thread}}
    first, *others = savers(run_url, 2)
    second = others[0] if others else first
    try:
        graph_a = reply_graph(lambda: None).compile(checkpointer=first)
        graph_b = reply_graph(lambda: None).compile(checkpointer=second)
        graph_a.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg)
        graph_b.invoke({"messages": [HumanMessage("two", id="h2")]}, cfg)  # first: stale
        reads = HeadReads(first)
        graph_a.invoke({"messages": [HumanMessage("three", id="h3")]}, cfg)
        assert reads.count == 0
        graph_a.invoke({"messages": [HumanMessage("four", id="h4")]}, cfg)
        assert reads.count == 0
        expected = ["one", "two", "three", "four"]
        assert whole_turns(graph_a.get_state(cfg).values["messages"]) == expected
        assert whole_turns(graph_b.get_state(cfg).values["messages"]) == expected
        # no half turn, no fork: one linear history through both savers
        history = list(second.list(cfg))
        parents = [t.parent_config["configurable"]["checkpoint_id"] for t in history[:-1]]  # type: ignore[index]
        assert parents == [t.config["configurable"]["checkpoint_id"] for t in history[1:]]
    finally:
        for s in {id(s): s for s in (first, second)}.values():
            s.close()


def stream_events(saver: StatekeeperSaver, thread: str) -> list[str]:
    async def kinds() -> list[str]:
        return [e.type async for e in saver.store.history(f"lg/{thread}#0")]

    return saver._portal.call(kinds())


def test_a_steps_writes_share_the_next_checkpoints_commit(run_url: str) -> None:
    """LangGraph saves a step's writes and the checkpoint after the step concurrently:
    they are stored by one commit, so a chat turn is 5 events (claim, input checkpoint,
    two steps, release) where it was 7, and every write still reads back."""
    # (the wait ends when the put comes; no claim renewal, every run_lease / 3, can land
    # among the counted events of a slow run on a loaded machine)
    (saver,) = savers(run_url, 1, writes_wait=GUARD, run_lease=3600)
    oracle = InMemorySaver()
    try:
        thread = new_thread()
        cfg = {"configurable": {"thread_id": thread}}
        graphs = [reply_graph(lambda: None).compile(checkpointer=s) for s in (saver, oracle)]
        for graph in graphs:
            graph.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg)
        before = len(stream_events(saver, thread))
        for graph in graphs:
            graph.invoke({"messages": [HumanMessage("two", id="h2")]}, cfg)
        kinds = stream_events(saver, thread)
        assert len(kinds) - before == 5, kinds
        assert "lg.w" not in kinds, kinds
        ours, theirs = (list(g.get_state_history(cfg)) for g in graphs)
        assert [s.values for s in ours] == [s.values for s in theirs]
        assert [[(w.name, w.result) for w in s.tasks] for s in ours] == [
            [(w.name, w.result) for w in s.tasks] for s in theirs
        ]
    finally:
        saver.close()


def extend(state: list[str] | None, writes: list[list[str]]) -> list[str]:
    return [*(state or []), *(x for w in writes for x in w)]


class Items(TypedDict):
    items: Annotated[list[str], DeltaChannel(extend)]
    n: int


def test_writes_langgraph_waits_for_are_not_held(run_url: str) -> None:
    """A graph with a ``DeltaChannel`` waits for a step's writes before it saves the
    next checkpoint: those writes are committed at once, never held for a checkpoint
    that cannot come (with ``writes_wait`` of an hour the run would hang)."""

    def step(state: Items) -> dict[str, Any]:
        return {"items": [f"i{state['n']}"], "n": state["n"] + 1}

    builder = StateGraph(Items)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < 3 else END)
    (saver,) = savers(run_url, 1, writes_wait=3600.0)
    try:
        graph = builder.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": new_thread()}}
        done: list[Any] = []
        worker = threading.Thread(
            target=lambda: done.append(graph.invoke({"items": [], "n": 0}, cfg, durability="sync")),
            daemon=True,
        )
        worker.start()
        worker.join(GUARD)
        assert done == [{"items": ["i0", "i1", "i2"], "n": 3}]
        assert graph.get_state(cfg).values == done[0]
    finally:
        saver.close()


def test_a_sync_runs_claim_rides_on_its_input_checkpoint(run_url: str) -> None:
    """A ``durability="sync"`` run stores its input checkpoint before any node runs, so
    its claim is stored by that checkpoint's commit: a turn is 4 commits (input with
    the claim, two steps, release) where it was 5, and reads back as on
    ``InMemorySaver``. With the default durability the claim keeps its own commit."""
    # (the wait ends when the put comes; no claim renewal, every run_lease / 3, can land
    # among the counted events of a slow run on a loaded machine)
    (saver,) = savers(run_url, 1, writes_wait=GUARD, run_lease=3600)
    oracle = InMemorySaver()
    try:
        for durability, claim_commit in (("sync", 0), ("async", 1)):
            thread = new_thread()
            cfg = {"configurable": {"thread_id": thread}}
            graphs = [reply_graph(lambda: None).compile(checkpointer=s) for s in (saver, oracle)]
            for graph in graphs:
                graph.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg, durability="sync")
            before = len(stream_events(saver, thread))
            for graph in graphs:
                graph.invoke(
                    {"messages": [HumanMessage("two", id="h2")]}, cfg, durability=durability
                )
            kinds = stream_events(saver, thread)[before:]
            assert len(kinds) == 4 + claim_commit, (durability, kinds)
            assert kinds[-1] == "lg.run"  # the release
            ours, theirs = (list(g.get_state_history(cfg)) for g in graphs)
            assert [s.values for s in ours] == [s.values for s in theirs]
            # released: another run (or update) passes at once
            saver_graph = graphs[0]
            saver_graph.update_state(cfg, {"messages": [HumanMessage("note", id="n")]})
    finally:
        saver.close()


def test_a_thread_moved_on_between_a_sync_runs_read_and_its_input_is_refused(
    run_url: str,
) -> None:
    """A riding claim is stored by the run's first write, not when it reads: when
    another run takes a whole turn in between, the late run's input is refused with
    ThreadBusyError (not a fork error), before its node ran, with nothing written."""
    if run_url == "memory://":
        pytest.skip("needs two savers on one store")
    moving = StatekeeperSaver.from_url(run_url)
    mover = reply_graph(lambda: None).compile(checkpointer=moving)
    cfg = {"configurable": {"thread_id": new_thread()}}
    mover.invoke({"messages": [HumanMessage("one", id="h1")]}, cfg)
    ran: list[str] = []

    class Racing(StatekeeperSaver):
        """Another run finishes a turn right after this saver's run read the thread."""

        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            if not ran:
                ran.append("moved")
                mover.invoke({"messages": [HumanMessage("two", id="h2")]}, cfg)
            return found

    racing = Racing.from_url(run_url)
    late = reply_graph(lambda: ran.append("late node")).compile(checkpointer=racing)
    try:
        with pytest.raises(ThreadBusyError) as info:
            late.invoke({"messages": [HumanMessage("late", id="late")]}, cfg, durability="sync")
        assert not info.value.lost
        assert ran == ["moved"]  # the late run's node never ran
        assert whole_turns(mover.get_state(cfg).values["messages"]) == ["one", "two"]
        late.invoke({"messages": [HumanMessage("three", id="h3")]}, cfg, durability="sync")
        assert whole_turns(mover.get_state(cfg).values["messages"]) == ["one", "two", "three"]
    finally:
        racing.close()
        moving.close()
