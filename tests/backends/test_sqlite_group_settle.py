"""How a shared commit of the SQLite commit queue hands its appends their outcomes
(``durability="group"``): a caller cancelled before the flush is left out of the
commit, one cancelled while the commit is in flight keeps its append, and every
other caller learns its own outcome — nothing lost, nothing written twice."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import ConflictError, StateStore
from statekeeper.backends.sqlite import SQLiteBackend, _settle
from statekeeper.errors import BackendError
from statekeeper.records import AppendResult
from statekeeper.testing import request

AGENTS = [f"agent-{i:02d}" for i in range(8)]


def _tag(agent_id: str, seq: int) -> bytes:
    return hashlib.sha256(f"{agent_id}/{seq}".encode()).digest()[:16]


async def _next(backend: SQLiteBackend, agent_id: str, seq: int) -> None:
    payload = f"{agent_id} {seq} ".encode() * 10
    await backend.append_next(
        agent_id,
        seq,
        float(seq),
        payload,
        hashlib.sha256(payload).digest(),
        _tag(agent_id, seq),
        _tag(agent_id, seq - 1) if seq > 1 else None,
    )


async def test_a_caller_cancelled_before_the_flush_is_left_out_of_the_shared_commit(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(tmp_path / "cancel.db", synchronous="OFF")
    try:
        # the first append opens the queue and lets the loop run once; the others join
        tasks = [asyncio.ensure_future(backend.append(request(a, 0))) for a in AGENTS]
        await asyncio.sleep(0)
        commits = backend.append_commits
        tasks[3].cancel()  # joined, not yet flushed
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[3], asyncio.CancelledError)
        assert [r for i, r in enumerate(results) if i != 3] == [
            AppendResult(a, 1, 1) for i, a in enumerate(AGENTS) if i != 3
        ]
        assert backend.append_commits == commits + 1  # the seven in one commit
        assert [await backend.head(a) for a in AGENTS] == [0 if i == 3 else 1 for i in range(8)]
    finally:
        await backend.close()


@contextlib.asynccontextmanager
async def _other_work() -> AsyncIterator[None]:
    """Work of the loop that stays ready to run until the block ends: the loop is
    never idle, so a batch's COMMIT is handed to the commit thread (a loop with nothing
    else to run commits it itself) and is in flight while the loop runs."""
    loop = asyncio.get_running_loop()
    stop = False

    def spin() -> None:  # a callback that schedules itself again: always one ready
        if not stop:
            loop.call_soon(spin)

    spin()
    try:
        yield
    finally:
        stop = True


async def test_a_caller_cancelled_while_its_commit_is_in_flight_keeps_its_append(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(tmp_path / "flight.db", synchronous="OFF")
    try:
        await asyncio.gather(*(_next(backend, a, 1) for a in AGENTS))
        async with _other_work():  # (the batch is handed off: in flight)
            await _cancel_one_in_flight(backend)
    finally:
        await backend.close()


async def _cancel_one_in_flight(backend: SQLiteBackend) -> None:
    """Eight appends whose commit is in flight; one caller cancelled before the
    landing: its append stands, once."""
    tasks = [asyncio.ensure_future(_next(backend, a, 2)) for a in AGENTS]
    landed = backend._landed

    def cancel_then_land(*args: Any) -> None:  # the commit is done, not yet handed back
        tasks[5].cancel()
        landed(*args)

    backend._landed = cancel_then_land  # type: ignore[method-assign, assignment]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[5], asyncio.CancelledError)
    assert [r for i, r in enumerate(results) if i != 5] == [None] * 7
    assert [await backend.head(a) for a in AGENTS] == [2] * 8  # its append stands
    again = asyncio.ensure_future(_next(backend, AGENTS[5], 2))
    with pytest.raises(ConflictError):  # ... once, not twice
        await again


async def test_settle_hands_each_future_its_own_outcome_or_the_whole_failure() -> None:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(4)]
    refusal = ConflictError("b", 1, 2)
    _settle(futures, [None, refusal, AppendResult("c", 3, 3), None])
    assert [f.result() for f in futures] == [None, refusal, AppendResult("c", 3, 3), None]

    futures = [loop.create_future() for _ in range(3)]
    futures[1].cancel()
    _settle(futures, ["a", "b", "c"])  # type: ignore[list-item]
    assert futures[1].cancelled()
    assert (futures[0].result(), futures[2].result()) == ("a", "c")

    futures = [loop.create_future() for _ in range(3)]
    futures[0].cancel()
    failure = BackendError("the commit failed")
    _settle(futures, failure)
    assert futures[0].cancelled()
    assert futures[1].exception() is failure and futures[2].exception() is failure


async def test_sixteen_agents_saving_at_once_store_every_save_exactly_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "group.db"
    agents = [f"agent-{i:02d}" for i in range(16)]
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability="group") as store:

        async def run(a: str) -> None:
            for n in range(25):
                await store.save(a, {"n": n, "who": a})

        await asyncio.gather(*(run(a) for a in agents))
        assert store.stats().commits < 16 * 25  # they shared commits
    async with StateStore(f"sqlite:///{path}") as fresh:
        for a in agents:
            history = [e.seq async for e in fresh.history(a)]
            assert history == list(range(1, 26))
            state = await fresh.load(a)
            assert state is not None and state.data == {"n": 24, "who": a}


def test_under_uvloop_group_saves_share_commits_and_a_stale_head_is_refused(
    tmp_path: Path,
) -> None:
    """uvloop's loop has neither asyncio's ready queue nor its selector: the engine
    then takes the pass of the loop it cannot rule out (a lone save included) — every
    save is still stored once, and an append on a stale head is refused."""
    uvloop = pytest.importorskip("uvloop")  # (the dev and bench extras install it)
    path = tmp_path / "uv.db"
    agents = [f"agent-{i:02d}" for i in range(16)]

    async def main() -> None:
        async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability="group") as store:

            async def run(a: str) -> None:
                for n in range(25):
                    await store.save(a, {"n": n})

            await asyncio.gather(*(run(a) for a in agents))
            assert store.stats().commits < 16 * 25
            await store.save("alone", {"n": 0})  # nobody to share its commit with
            engine = store.backend
            assert isinstance(engine, SQLiteBackend)
            with pytest.raises(ConflictError):  # seq 25 is taken: refused, not doubled
                await _next(engine, agents[0], 25)
        async with StateStore(f"sqlite:///{path}") as fresh:
            for a in agents:
                assert [e.seq async for e in fresh.history(a)] == list(range(1, 26))
            assert [e.seq async for e in fresh.history("alone")] == [1]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


async def _hand_offs(
    path: Path, agents: int, saves: int, busy: bool = False
) -> tuple[int, int, int]:
    """(hand-offs of a COMMIT to the commit thread, commits, saves) of ``agents``
    saving ``saves`` times each at once through ``durability="group"``; with ``busy``,
    beside another task of the loop that is always ready to run."""
    names = [f"agent-{i:02d}" for i in range(agents)]
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability="group") as store:
        engine = store.backend
        assert isinstance(engine, SQLiteBackend)
        handed = 0
        hand = engine._hand_commit

        def counting(*args: Any) -> bool:
            nonlocal handed
            handed += 1
            return hand(*args)

        engine._hand_commit = counting  # type: ignore[method-assign, assignment]

        async def run(a: str) -> None:
            for n in range(saves):
                await store.save(a, {"n": n, "who": a})

        if busy:
            async with _other_work():
                await asyncio.gather(*(run(a) for a in names))
        else:
            await asyncio.gather(*(run(a) for a in names))
        commits = store.stats().commits
    async with StateStore(f"sqlite:///{path}") as fresh:
        for a in names:
            assert [e.seq async for e in fresh.history(a)] == list(range(1, saves + 1))
    return handed, commits, agents * saves


async def test_four_agents_share_commits_made_on_the_loop_without_a_thread_hop(
    tmp_path: Path,
) -> None:
    """With a few agents nothing could use the loop during a commit's fsync: the batch is
    committed on the loop (no hand-off to the commit thread and back, which cost more
    than the fsync on a loaded machine and made ``group`` slower than ``sync``)."""
    handed, commits, saves = await _hand_offs(tmp_path / "four.db", 4, 30)
    assert handed == 0
    assert commits <= saves // 2  # still shared: ~4 saves a commit


async def test_sixteen_agents_with_nothing_else_to_run_commit_on_the_loop(
    tmp_path: Path,
) -> None:
    """Every saver waits for the batch in flight, so nothing could use the loop during
    its fsync: the batch is committed on the loop (handing the COMMIT off and its
    landing back cost two thread hops for an overlap nobody uses; docs/benchmarks.md,
    "group3: a batch committed on the loop"), and the saves still share commits."""
    handed, commits, saves = await _hand_offs(tmp_path / "sixteen.db", 16, 20)
    assert handed == 0
    assert commits <= saves // 4


async def test_sixteen_agents_hand_their_commits_off_while_the_loop_has_other_work(
    tmp_path: Path,
) -> None:
    handed, commits, saves = await _hand_offs(tmp_path / "busy.db", 16, 20, busy=True)
    assert handed >= commits // 2  # the loop runs the other task during the fsync
    assert commits <= saves // 4


async def test_a_loop_with_io_waiting_is_not_idle_for_a_batch_commit(tmp_path: Path) -> None:
    """A batch is committed on the loop only when the loop would sit idle during it:
    with a socket ready to be read by one of its readers (polled once the lone-save
    bound, ``PASS_EVERY``, went by), the batch is handed off instead."""
    loop = asyncio.get_running_loop()
    backend = SQLiteBackend(tmp_path / "io.db", synchronous="OFF")
    left, right = socket.socketpair()
    try:
        backend._pass_due = 0.0  # the bound went by: the loop is polled
        assert backend._loop_idle(loop)  # nothing waits
        loop.add_reader(left.fileno(), lambda: None)
        right.send(b"x")  # now I/O waits for the loop
        backend._pass_due = 0.0
        assert not backend._loop_idle(loop)
        loop.remove_reader(left.fileno())
    finally:
        left.close()
        right.close()
        await backend.close()
