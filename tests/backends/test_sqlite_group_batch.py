"""The SQLite commit queue's shared commit (``durability="group"``): one batch, each
append's own compare-and-set, and the rows it stores exactly as they were given."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

from statekeeper import ConflictError, StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import RawSnapshot

from ._sqlite_trace import detach_trace

AGENTS = [f"agent-{i:02d}" for i in range(16)]
STALE = AGENTS[7]


def _tag(agent_id: str, seq: int) -> bytes:
    return hashlib.sha256(f"{agent_id}/{seq}".encode()).digest()[:16]


def _payload(agent_id: str, seq: int) -> bytes:
    return f"{agent_id} event {seq} ".encode() * 20


def _checksum(agent_id: str, seq: int) -> bytes:
    return hashlib.sha256(_payload(agent_id, seq)).digest()


async def _next(backend: SQLiteBackend, agent_id: str, seq: int, expected: bytes | None) -> None:
    await backend.append_next(
        agent_id,
        seq,
        float(seq),
        _payload(agent_id, seq),
        _checksum(agent_id, seq),
        _tag(agent_id, seq),
        expected,
    )


async def test_one_stale_append_among_fifteen_fails_alone_in_the_shared_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "group.db"
    backend = SQLiteBackend(path)
    try:
        await asyncio.gather(*(_next(backend, a, 1, None) for a in AGENTS))
        commits = backend.append_commits
        # all 16 made in one tick: they join one queue and go as one batch
        results = await asyncio.gather(
            *(_next(backend, a, 2, b"stale" if a == STALE else _tag(a, 1)) for a in AGENTS),
            return_exceptions=True,
        )
        assert backend.append_commits == commits + 1  # one shared commit
        stale = results[AGENTS.index(STALE)]
        assert isinstance(stale, ConflictError)
        assert (stale.agent_id, stale.expected_seq, stale.current_seq) == (STALE, 1, 1)
        assert [r for a, r in zip(AGENTS, results, strict=True) if a != STALE] == [None] * 15
        with closing(sqlite3.connect(path)) as conn:
            heads = dict(conn.execute("SELECT agent_id, head_seq FROM sk_agents").fetchall())
            tags = dict(conn.execute("SELECT agent_id, head_tag FROM sk_agents").fetchall())
            rows = conn.execute(
                "SELECT agent_id, seq, payload, checksum FROM sk_events WHERE seq = 2"
            ).fetchall()
        assert heads == {a: 1 if a == STALE else 2 for a in AGENTS}
        assert tags == {a: _tag(a, 1 if a == STALE else 2) for a in AGENTS}
        # stored as given (BLOBs, byte for byte), nothing of the stale append
        assert sorted(rows) == [
            (a, 2, _payload(a, 2), _checksum(a, 2)) for a in AGENTS if a != STALE
        ]
        for a in AGENTS:
            if a != STALE:
                (event,) = await backend.read(a, 1)
                assert (event.payload, event.checksum) == (_payload(a, 2), _checksum(a, 2))
        # the heads the batch stored check as the tags they were given: a lone append
        # (bound as it is, not through the batch) on each of them lands
        for a in AGENTS:
            if a != STALE:
                await _next(backend, a, 3, _tag(a, 2))
        assert await backend.head(AGENTS[0]) == 3
    finally:
        await backend.close()


async def test_group_store_one_stale_save_among_fifteen_fails_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    async with StateStore(url, durability="group") as store:
        await asyncio.gather(*(store.save(a, {"n": 0}) for a in AGENTS))
        results = await asyncio.gather(
            *(store.save(a, {"n": 1}, expected_seq=5 if a == STALE else 1) for a in AGENTS),
            return_exceptions=True,
        )
        stale = results[AGENTS.index(STALE)]
        assert isinstance(stale, ConflictError) and stale.current_seq == 1
        assert all(
            not isinstance(r, BaseException) and r.last_seq == 2
            for a, r in zip(AGENTS, results, strict=True)
            if a != STALE
        )
    async with StateStore(url) as other:
        loaded = [(await other.load(a)).data["n"] for a in AGENTS]
    assert loaded == [0 if a == STALE else 1 for a in AGENTS]


async def _batch_statements(path: Path, busy: bool) -> list[tuple[int, str]]:
    """(thread, SQL) of a batch of 16 appends, up to its COMMIT; with ``busy``, another
    task of the loop stays ready to run meanwhile (work the loop could do during the
    batch's fsync)."""
    backend = SQLiteBackend(path)
    seen: list[tuple[int, str]] = []
    loop = asyncio.get_running_loop()
    stop = False

    def other_work() -> None:  # schedules itself again: the loop is never idle
        if not stop:
            loop.call_soon(other_work)

    try:
        await asyncio.gather(*(_next(backend, a, 1, None) for a in AGENTS))
        conn = backend._writer
        assert conn is not None
        conn.set_trace_callback(lambda sql: seen.append((threading.get_ident(), sql)))
        if busy:
            other_work()
        await asyncio.gather(*(_next(backend, a, 2, _tag(a, 1)) for a in AGENTS))
        stop = True
        await detach_trace(backend)
    finally:
        await backend.close()
    # the batch's statements: up to its COMMIT (the writer thread may run the WAL's
    # growth step after the saves were acknowledged, before the trace was detached)
    ends = [i for i, (_, sql) in enumerate(seen) if sql == "COMMIT"]
    return seen[: ends[0] + 1] if ends else seen


async def test_a_batch_is_written_on_the_loop_and_only_its_commit_leaves_it(
    tmp_path: Path,
) -> None:
    # On the writer thread each statement gave the GIL back to a busy event loop and
    # waited for it until the loop went idle: the commit never overlapped the loop's
    # work. The loop writes the batch; only the COMMIT (the fsync) runs elsewhere,
    # while the loop has other work to do.
    seen = await _batch_statements(tmp_path / "threads.db", busy=True)
    loop_thread = threading.get_ident()
    claims = [t for t, sql in seen if sql.startswith("UPDATE sk_agents")]
    writes = [t for t, sql in seen if sql.startswith(("UPDATE", "INSERT"))]
    commits = [t for t, sql in seen if sql == "COMMIT"]
    assert len(claims) == len(AGENTS) and set(writes) == {loop_thread}
    assert len(commits) == 1 and commits[0] != loop_thread


async def test_a_batch_with_nothing_else_to_run_is_committed_on_the_loop(
    tmp_path: Path,
) -> None:
    # Nothing else of the loop can run during the batch's fsync (every saver waits for
    # this commit): handing the COMMIT to the commit thread and its landing back would
    # only add two thread hops to the loop's wait. The whole batch, its COMMIT
    # included, is made on the loop (docs/benchmarks.md, "group3: a batch committed
    # on the loop").
    seen = await _batch_statements(tmp_path / "idle.db", busy=False)
    loop_thread = threading.get_ident()
    claims = [t for t, sql in seen if sql.startswith("UPDATE sk_agents")]
    commits = [t for t, sql in seen if sql == "COMMIT"]
    assert len(claims) == len(AGENTS)
    assert {t for t, _ in seen} == {loop_thread}
    assert len(commits) == 1


async def test_a_batch_and_writes_queued_on_the_writer_thread_all_complete(
    tmp_path: Path,
) -> None:
    # The batch holds the writer from its BEGIN (on the loop) to its COMMIT (on the
    # commit thread); writes queued meanwhile on the writer thread wait for it there
    # and then run: nothing waits on anything that waits on it.
    backend = SQLiteBackend(tmp_path / "mixed.db")
    try:
        await asyncio.gather(*(_next(backend, a, 1, None) for a in AGENTS))
        for seq in range(2, 6):
            await asyncio.gather(
                *(_next(backend, a, seq, _tag(a, seq - 1)) for a in AGENTS),
                backend.delete_agent(f"gone-{seq}"),  # a write through the writer thread
            )
        assert [await backend.head(a) for a in AGENTS] == [5] * len(AGENTS)
    finally:
        await backend.close()


def _row(agent_id: str, seq: int, expected: bytes | None) -> tuple[Any, ...]:
    return (
        agent_id,
        seq,
        float(seq),
        _payload(agent_id, seq),
        _checksum(agent_id, seq),
        _tag(agent_id, seq),
        expected,
        None,
    )


async def test_join_next_puts_a_row_in_the_open_commit_and_hands_back_its_refusal(
    tmp_path: Path,
) -> None:
    """``join_next`` (the group committer's common save without coroutines): with no
    commit of the loop open it does nothing; with one open, each row joins it, lands in
    the next shared commit, and a stale row's ConflictError comes back as the result
    (for the caller to raise), the others stored."""
    backend = SQLiteBackend(tmp_path / "join.db")
    try:
        assert backend.join_next(_row(AGENTS[0], 1, None)) is None  # no commit open
        assert await backend.head(AGENTS[0]) == 0  # nothing written
        await asyncio.gather(*(_next(backend, a, 1, None) for a in AGENTS))
        commits = backend.append_commits
        opener = asyncio.ensure_future(_next(backend, AGENTS[0], 2, _tag(AGENTS[0], 1)))
        await asyncio.sleep(0)  # the opener's pass: its queue is open now
        joined = [
            backend.join_next(_row(a, 2, b"stale" if a == STALE else _tag(a, 1)))
            for a in AGENTS[1:]
        ]
        assert all(j is not None for j in joined)
        await opener
        outcomes = await asyncio.gather(*(j for j in joined if j is not None))
        assert backend.append_commits == commits + 1  # all 16 in one shared commit
        stale = outcomes[AGENTS.index(STALE) - 1]
        assert isinstance(stale, ConflictError) and stale.agent_id == STALE
        assert [o for o in outcomes if o is not stale] == [None] * 14
        heads = [await backend.head(a) for a in AGENTS]
        assert heads == [1 if a == STALE else 2 for a in AGENTS]
    finally:
        await backend.close()


async def test_group_saves_that_join_an_open_commit_share_it_and_retry_a_stale_head(
    tmp_path: Path,
) -> None:
    """16 agents saving at once through ``durability="group"``: a save that finds its
    loop's commit open joins it (no coroutine of its own), one whose cached head went
    stale (another store wrote it) is written again on a fresh read: nothing lost."""
    path = tmp_path / "store.db"
    async with (
        StateStore(f"sqlite:///{path}", durability="group", witness=False) as store,
        StateStore(f"sqlite:///{path}", witness=False) as other,
    ):
        await asyncio.gather(*(store.save(a, {"n": 0}) for a in AGENTS))
        await other.save(STALE, {"n": 0, "other": True})  # store's cached head is stale
        joined = 0
        engine = store.backend
        assert isinstance(engine, SQLiteBackend)
        original = engine.join_next

        def counting(row: Any) -> Any:
            nonlocal joined
            found = original(row)
            joined += found is not None
            return found

        engine.join_next = counting  # type: ignore[method-assign]
        await asyncio.gather(*(store.save(a, {"n": 1}) for a in AGENTS))
        assert joined >= 1  # the saves after the first joined its commit
        for a in AGENTS:
            state = await store.load(a)
            assert state is not None and state.data["n"] == 1
        assert (await other.load(STALE)).data == {"n": 1}  # type: ignore[union-attr]


async def test_a_shared_commit_stores_its_snapshots_and_two_appends_of_one_stream(
    tmp_path: Path,
) -> None:
    """A batch of rows on existing heads is written statement by statement kind (every
    head's compare-and-set, then every event row, then the snapshots): a row's
    snapshot is stored with it, and two appends of one stream in one batch land in
    order, each on the head the other left."""
    backend = SQLiteBackend(tmp_path / "snap.db")
    try:
        await asyncio.gather(*(_next(backend, a, 1, None) for a in AGENTS))
        commits = backend.append_commits
        opener = asyncio.ensure_future(_next(backend, AGENTS[0], 2, _tag(AGENTS[0], 1)))
        await asyncio.sleep(0)  # the opener's pass: its queue is open now
        snap = RawSnapshot(2, 2.0, b"state of agent-01 at 2", b"c" * 32)
        rows = [
            (*_row(AGENTS[1], 2, _tag(AGENTS[1], 1))[:7], snap),
            _row(AGENTS[2], 2, _tag(AGENTS[2], 1)),
            _row(AGENTS[2], 3, _tag(AGENTS[2], 2)),  # on the head the row before leaves
        ]
        joined = [backend.join_next(row) for row in rows]  # type: ignore[arg-type]
        await opener
        assert await asyncio.gather(*(j for j in joined if j is not None)) == [None] * 3
        assert backend.append_commits == commits + 1  # one shared commit
        assert [await backend.head(a) for a in AGENTS[:3]] == [2, 2, 3]
        assert await backend.latest_snapshot(AGENTS[1]) == snap
        assert await backend.latest_snapshot(AGENTS[2]) is None
        events = await backend.read(AGENTS[2], 1)
        assert [(e.seq, e.payload) for e in events] == [
            (2, _payload(AGENTS[2], 2)),
            (3, _payload(AGENTS[2], 3)),
        ]
    finally:
        await backend.close()


async def test_a_shared_commit_of_rows_without_head_tags_and_of_a_new_stream(
    tmp_path: Path,
) -> None:
    """The batch's rows are made column by column when every row carries head tags; a
    batch with a row without them (a store that keeps none), or with a new stream's
    first row, is written row by row: each lands on its own head either way."""
    backend = SQLiteBackend(tmp_path / "tagless.db")
    try:
        for a in AGENTS[:3]:
            await backend.append_next(a, 1, 1.0, _payload(a, 1), _checksum(a, 1), None, None)
        await _next(backend, AGENTS[3], 1, None)
        for seq, rows in (
            (
                2,
                [
                    (a, 2, 2.0, _payload(a, 2), _checksum(a, 2), None, None, None)
                    for a in AGENTS[:3]
                ],
            ),
            (3, [_row(AGENTS[3], 2, _tag(AGENTS[3], 1)), _row(AGENTS[4], 1, None)]),
        ):
            commits = backend.append_commits
            opener = asyncio.ensure_future(
                _next(backend, AGENTS[5], seq - 1, _tag(AGENTS[5], seq - 2) if seq > 2 else None)
            )
            await asyncio.sleep(0)  # the opener's pass: its queue is open now
            joined = [backend.join_next(row) for row in rows]  # type: ignore[arg-type]
            await opener
            assert await asyncio.gather(*(j for j in joined if j is not None)) == [None] * len(rows)
            assert backend.append_commits == commits + 1  # one shared commit
        assert [await backend.head(a) for a in AGENTS[:6]] == [2, 2, 2, 2, 1, 2]
        for a in AGENTS[:3]:
            assert [e.payload for e in await backend.read(a, 1)] == [_payload(a, 2)]
        assert [e.payload for e in await backend.read(AGENTS[3], 1)] == [_payload(AGENTS[3], 2)]
    finally:
        await backend.close()
