"""The SQLite backend: the shared contract, plus what only a file on disk can do."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import _BUSY, CHECKPOINT_PAGES, PAGE_SIZE, SQLiteBackend
from statekeeper.backends.sqlite import opening as sqlite_opening
from statekeeper.backends.sqlite.running import PASS_EVERY
from statekeeper.backends.url import open_backend
from statekeeper.errors import (
    BackendError,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    NotAStore,
)
from statekeeper.records import AppendResult
from statekeeper.store import StateStore
from statekeeper.testing import BackendConformance, request, snapshot


class TestSQLiteConformance(BackendConformance):
    async def make_backend(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "conformance.db")

    async def open_peer(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "conformance.db")

    async def open_readonly(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "conformance.db", readonly=True)


class TestSQLiteThreadWritesConformance(BackendConformance):
    """Every write on the writer thread (``inline_writes=False``): the same contract."""

    async def make_backend(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "conformance.db", inline_writes=False)

    async def open_peer(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "conformance.db", inline_writes=False)


async def test_inline_writes_share_the_writer_with_batches(tmp_path: Path) -> None:
    """Inline appends and thread-run batches interleave without losing or doubling."""
    import asyncio

    from statekeeper.store import StateStore

    backend = SQLiteBackend(tmp_path / "mixed.db", inline_writes=True)
    inline = StateStore(backend)  # single appends: inline when the writer is idle
    grouped = StateStore(backend, durability="group")  # batches: on the writer thread

    async def writer(store: StateStore, agent: str) -> None:
        for i in range(30):
            await store.save(agent, {"n": i})

    await asyncio.gather(
        *(writer(inline, f"i{k}") for k in range(3)),
        *(writer(grouped, f"g{k}") for k in range(3)),
    )
    for agent in [f"i{k}" for k in range(3)] + [f"g{k}" for k in range(3)]:
        assert (await inline.load(agent)).data == {"n": 29}
        assert await backend.head(agent) == 30
    assert (await inline.verify()).ok
    await grouped.flush()
    await backend.close()


# -- inline writes, the default: no thread hop, and still safe for the event loop ------


async def test_a_loop_of_appends_lets_other_tasks_run(tmp_path: Path) -> None:
    """A task saving in a tight loop yields to the event loop once per append, even
    when each append runs inline: other tasks are not starved until it finishes."""
    backend = SQLiteBackend(tmp_path / "fair.db", synchronous="OFF")
    trace: list[str] = []
    done = asyncio.Event()

    async def saver() -> None:
        for seq in range(1, 21):
            await backend.append(request("a", seq - 1))
            trace.append("w")
        done.set()

    async def other() -> None:
        while not done.is_set():
            trace.append("o")
            await asyncio.sleep(0)

    try:
        await asyncio.gather(saver(), other())
    finally:
        await backend.close()
    between = "".join(trace)[: "".join(trace).rindex("w")]
    # the other task ran between every two appends
    assert "ww" not in between, between


async def test_a_lone_append_with_nothing_else_ready_makes_no_pass_of_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no other task ready, an append has nothing to wait for in a pass of the
    loop (no append could join it, no task is kept waiting): it commits at once, and
    the loop is polled once PASS_EVERY of loop time went by since the last poll (the
    I/O and timers a pass would run): with none waiting, no pass either, and the bound
    starts again (the next test: with I/O or a timer waiting, the pass is made). The
    test above: with another task ready, one pass per append as before."""
    backend = SQLiteBackend(tmp_path / "pass.db", synchronous="OFF")
    passes = 0
    sleep = asyncio.sleep

    async def counted(delay: float, result: Any = None) -> Any:
        nonlocal passes
        passes += 1
        return await sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", counted)
    loop = asyncio.get_running_loop()
    try:
        backend._pass_due = loop.time() + 3600.0  # (as if a pass had just been made)
        for seq in range(1, 21):
            await backend.append(request("a", seq - 1))
        assert passes == 0
        backend._pass_due = 0.0  # PASS_EVERY went by: the next append polls the loop
        before = loop.time()
        await backend.append(request("a", 20))
        assert passes == 0  # nothing waited: no pass
        # (and the bound starts again from the poll: PASS_EVERY after it, whenever that
        # was — compared with a time read before the append, not with the clock now,
        # which a loaded machine may have moved past a 1 ms bound already)
        assert backend._pass_due >= before + PASS_EVERY
        assert await backend.head("a") == 21
    finally:
        await backend.close()


async def test_a_lone_append_past_pass_every_makes_the_pass_when_io_or_a_timer_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once PASS_EVERY went by, an append whose poll of the loop finds I/O ready or a
    timer due makes its pass, and what waited runs (before this loop of appends goes
    on without yielding); a loop of appends never starves them."""
    backend = SQLiteBackend(tmp_path / "waiting.db", synchronous="OFF")
    passes = 0
    sleep = asyncio.sleep

    async def counted(delay: float, result: Any = None) -> Any:
        nonlocal passes
        passes += 1
        return await sleep(delay, result)

    loop = asyncio.get_running_loop()
    ran: list[str] = []
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    try:
        await backend.append(request("a", 0))
        monkeypatch.setattr(asyncio, "sleep", counted)
        # I/O ready: a reader whose socket has a byte to read
        loop.add_reader(reader, lambda: ran.append(reader.recv(1).decode()))
        writer.send(b"r")
        backend._pass_due = 0.0
        await backend.append(request("a", 1))
        assert passes == 1
        while not ran:  # (it runs on the loop's next turn; this loop never waits)
            await backend.append(request("a", await backend.head("a")))
        loop.remove_reader(reader)
        assert ran == ["r"]
        # a timer due
        loop.call_at(loop.time() - 1.0, ran.append, "t")
        backend._pass_due = 0.0
        before = passes
        await backend.append(request("a", await backend.head("a")))
        assert passes == before + 1
        while ran[-1] != "t":
            await backend.append(request("a", await backend.head("a")))
        # and with nothing waiting again, no pass
        backend._pass_due = 0.0
        before = passes
        await backend.append(request("a", await backend.head("a")))
        assert passes == before
    finally:
        reader.close()
        writer.close()
        await backend.close()


async def test_a_write_lock_held_elsewhere_never_blocks_the_loop(tmp_path: Path) -> None:
    """While another connection holds the write lock, an append waits for it off the
    event loop (on the writer thread), and lands once the lock is released."""
    path = tmp_path / "held.db"
    backend = SQLiteBackend(path, busy_timeout=20.0)
    await backend.append(request("a", 0))
    holder = _raw(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        task = asyncio.create_task(backend.append(request("a", 1)))
        for _ in range(50):  # the loop keeps turning while the append waits
            await asyncio.sleep(0)
        assert not task.done()
        holder.execute("COMMIT")
        assert await task == AppendResult("a", 2, 2)
        # with the lock free again, appends run inline again
        assert await backend.append(request("a", 2)) == AppendResult("a", 3, 3)
    finally:
        holder.close()
        await backend.close()


async def test_concurrent_appends_share_one_commit(tmp_path: Path) -> None:
    """Appends made by tasks ready in the same pass of the loop share one commit,
    each still all-or-nothing on its own (a conflict does not undo the others)."""
    backend = SQLiteBackend(tmp_path / "group.db")
    statements: list[str] = []
    assert backend._writer is not None
    backend._writer.set_trace_callback(statements.append)
    try:
        results = await asyncio.gather(
            *(backend.append(request(f"a{i}", 0)) for i in range(16)),
            backend.append(request("a0", 5)),  # a conflict: refused alone
            return_exceptions=True,
        )
        assert results[:16] == [AppendResult(f"a{i}", 1, 1) for i in range(16)]
        assert isinstance(results[16], ConflictError)
        assert sum(s.strip().upper() == "COMMIT" for s in statements) == 1
        assert [await backend.head(f"a{i}") for i in range(16)] == [1] * 16
    finally:
        await backend.close()


_WAL_CHILD = """
import asyncio, sys
from pathlib import Path
from statekeeper.backends.sqlite import CHECKPOINT_PAGES, SQLiteBackend
from statekeeper.records import AppendRequest, RawEvent

async def main(path):
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        for seq in range(1, 4001):
            event = RawEvent(seq, "patch", float(seq), b"x" * 3000, b"sum")
            await backend.append(AppendRequest("a", seq - 1, (event,)))
        assert await backend.head("a") == 4000
        print(Path(f"{path}-wal").stat().st_size)
    finally:
        await backend.close()

asyncio.run(main(sys.argv[1]))
"""


def test_the_wal_is_checkpointed_off_the_commit(tmp_path: Path) -> None:
    """The writer's auto-checkpoint is off (no commit runs a checkpoint); checkpoints
    queued on the writer thread keep the WAL from growing without bound.

    Run in a fresh interpreter, so no other test's state is involved."""
    import subprocess
    import sys

    path = tmp_path / "wal.db"
    done = subprocess.run(
        [sys.executable, "-c", _WAL_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    # 4000 appends write ~8000 WAL frames (~33 MB) with no checkpoint; a checkpoint every
    # ~1000 frames lets the WAL restart: ~4.3 MB, whatever the machine's load (commits
    # queue behind a due checkpoint, see the next test). Bound: 12 MB.
    wal = int(done.stdout.strip())
    assert wal < 12 * 1024 * 1024, wal


async def test_the_wal_restarts_near_the_checkpoint_size_on_its_first_fill(
    tmp_path: Path,
) -> None:
    """The first checkpoint of a store comes after about CHECKPOINT_PAGES WAL frames
    written, not estimated: the backend checks its estimate of the pages a commit
    writes against the WAL's size early. Until the WAL first restarts every commit
    extends the file (on ext4 an fdatasync after a file's growth also commits the
    journal), so the WAL's largest size is how long commits pay for that. Before, the
    estimate (~3.5 pages for a lone chat save writing ~5.75 frames) let the WAL grow to
    ~1,850 frames before the first checkpoint, twice SQLite's own auto-checkpoint."""
    path = tmp_path / "fill.db"
    store = StateStore(f"sqlite:///{path}?synchronous=OFF", durability="sync")
    try:
        history: dict[str, list[str]] = {f"agent-{i}": [] for i in range(8)}
        for step in range(60):  # 480 lone saves of a growing chat, ~2,700 frames
            for agent_id, messages in history.items():
                messages.append(f"{agent_id} says {step}: " + "x" * 280)
                await store.save(agent_id, {"messages": list(messages)})
        page_size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
        frames = (path.with_name("fill.db-wal").stat().st_size - 32) // (page_size + 24)
        assert frames >= CHECKPOINT_PAGES // 2  # (it was filled)
        assert frames <= 1.25 * CHECKPOINT_PAGES, frames
        assert (await store.load("agent-7")).data["messages"] == history["agent-7"]
    finally:
        await store.close()


async def test_a_due_checkpoint_runs_before_the_next_commit(tmp_path: Path) -> None:
    """Once a checkpoint is queued on the writer thread, the next append queues behind
    it instead of committing inline first. (Inline commits used to win the idle writer
    lock again and again while the writer thread waited to be scheduled: on a loaded
    machine the WAL grew by every commit made meanwhile, 14-17 MB instead of ~4 MB.)"""
    import threading

    backend = SQLiteBackend(tmp_path / "order.db", synchronous="OFF")
    order: list[str] = []
    checkpoint, append_sync = backend._checkpoint, backend._append_batch_sync
    commit_lone = backend._commit_lone

    def logged_checkpoint() -> None:
        order.append("checkpoint")
        checkpoint()

    def logged_append(requests: Any) -> Any:
        order.append("append")
        return append_sync(requests)

    def logged_lone(*args: Any) -> Any:  # (a lone append committed inline)
        found = commit_lone(*args)
        if found is not _BUSY:
            order.append("append")
        return found

    backend._checkpoint = logged_checkpoint  # type: ignore[method-assign]
    backend._append_batch_sync = logged_append  # type: ignore[method-assign]
    backend._commit_lone = logged_lone  # type: ignore[method-assign, assignment]
    release = threading.Event()
    # the writer thread kept busy, the writer lock left idle: an inline commit could win
    # it, and only the due checkpoint keeps the second append off it. (The lock held by
    # the blocker made the first append wait forever behind it whenever the pool's
    # thread took the lock before that append ran: seen on a loaded machine.)
    blocker = backend._writer_pool.submit(release.wait)
    try:
        await backend.append(request("a", 0))  # inline: the writer lock is idle
        backend._wrote(10 * CHECKPOINT_PAGES)  # a checkpoint is due: queued behind blocker
        task = asyncio.ensure_future(backend.append(request("a", 1)))
        for _ in range(5):  # passes of the loop (no durations): an inline commit ran here
            await asyncio.sleep(0)
        release.set()
        assert await task == AppendResult("a", 2, 2)
        assert order == ["append", "checkpoint", "append"]
    finally:
        release.set()
        blocker.result()
        await backend.close()


async def test_appends_arriving_while_a_commit_is_in_flight_share_the_next_one(
    tmp_path: Path,
) -> None:
    """Group commit: while a batch is on the writer thread, the appends that arrive —
    over any number of passes of the loop — wait in the queue and go together as the
    next commit the moment it lands (they used to be committed one by one: inline, or
    as one writer-thread job per pass of the loop)."""
    import threading

    backend = SQLiteBackend(tmp_path / "group.db", synchronous="OFF")
    loop = asyncio.get_running_loop()
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        held.set()
        release.wait()

    # the writer thread kept busy, holding the writer lock: the pair cannot be written
    # on the loop (group11's batch path) and queues on the writer thread behind it
    blocker = backend._writer_pool.submit(backend._locked, hold)
    try:
        # (the lock taken before the pair comes: on a loaded machine the pool's thread
        # could start after it, and the pair was then written on the loop)
        await asyncio.to_thread(held.wait)
        first = [asyncio.ensure_future(backend.append(request(f"a{i}", 0))) for i in range(2)]
        for _ in range(100):  # passes of the loop, until the pair is on the writer thread
            if loop in backend._in_flight:
                break
            await asyncio.sleep(0)
        assert loop in backend._in_flight
        commits = backend.append_commits
        later = []
        for i in range(6):  # six passes of the loop, one append in each
            later.append(asyncio.ensure_future(backend.append(request(f"b{i}", 0))))
            await asyncio.sleep(0)
        assert backend.append_commits == commits  # none of them went on its own
        release.set()
        results = await asyncio.gather(*first, *later)
        assert [r.last_seq for r in results] == [1] * 8
        assert backend.append_commits - commits == 2  # the pair, then the six together
        for i in range(6):
            assert await backend.head(f"b{i}") == 1
    finally:
        release.set()
        blocker.result()
        await backend.close()


async def test_a_lone_append_cancelled_before_its_commit_leaves_the_others_going(
    tmp_path: Path,
) -> None:
    """The append that opened the queue flushes it after one pass of the loop; if it is
    cancelled in that pass, the appends that joined it are still committed, and the
    cancelled one is not."""
    backend = SQLiteBackend(tmp_path / "cancel.db", synchronous="OFF")
    try:
        opener = asyncio.ensure_future(backend.append(request("a", 0)))
        await asyncio.sleep(0)  # it opened the queue and lets the loop run once
        joined = asyncio.ensure_future(backend.append(request("b", 0)))
        opener.cancel()
        assert await joined == AppendResult("b", 1, 1)
        with pytest.raises(asyncio.CancelledError):
            await opener
        assert await backend.head("a") == 0
    finally:
        await backend.close()


# -- SQLite only ------------------------------------------------------------------------

CHILD = Path(__file__).with_name("_race_child.py")


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def race(db: Path, names: list[str], rounds: int) -> dict[str, set[int]]:
    """Run one child per name against ``db``, all started at once; return their wins."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(db), name, str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:  # start them as close together as possible
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    return {
        name: set(json.loads(out.strip().splitlines()[-1]))
        for name, (out, _) in zip(names, outputs, strict=True)
    }


def stored_race(db: Path) -> list[tuple[int, bytes]]:
    with closing(_raw(db)) as conn:
        return conn.execute(
            "SELECT seq, payload FROM sk_events WHERE agent_id = 'race' ORDER BY seq"
        ).fetchall()


def test_two_processes_race_one_winner_per_seq(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    rounds = 150
    wins = race(db, ["A", "B"], rounds)
    assert not wins["A"] & wins["B"]
    assert wins["A"] | wins["B"] == set(range(1, rounds + 1))
    rows = stored_race(db)
    assert [seq for seq, _ in rows] == list(range(1, rounds + 1))
    for seq, payload in rows:
        assert payload == f"{'A' if seq in wins['A'] else 'B'}-{seq}".encode()


def test_many_processes_create_one_file_at_once(tmp_path: Path) -> None:
    # All of them create the schema and switch the new file to WAL at the same time;
    # then exactly one wins the single seq.
    db = tmp_path / "fresh.db"
    names = [f"P{i}" for i in range(6)]
    wins = race(db, names, 1)
    assert sorted(len(w) for w in wins.values()) == [0, 0, 0, 0, 0, 1]
    (winner,) = (name for name, w in wins.items() if w)
    assert stored_race(db) == [(1, f"{winner}-1".encode())]


def test_opening_a_store_while_another_process_writes_takes_no_lock(tmp_path: Path) -> None:
    # Opening an existing, current store writes nothing (no schema transaction, the
    # file is already WAL): it works at once while another process holds the lock.
    path = tmp_path / "busy.db"
    asyncio.run(_seed(path))
    other = _raw(path)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE sk_meta SET value = value WHERE key = 'schema_version'")
    try:
        backend = SQLiteBackend(path, busy_timeout=30)
        assert asyncio.run(backend.head("a")) == 1
        asyncio.run(backend.close())
    finally:
        other.execute("COMMIT")
        other.close()


def _wal_header(path: Path) -> bytes:
    wal = Path(f"{path}-wal")
    return wal.read_bytes()[:32] if wal.exists() else b""


async def test_a_new_file_starts_its_wal_when_opened_not_on_the_first_save(
    tmp_path: Path,
) -> None:
    """The first commit into an empty WAL writes the WAL's header and syncs it and its
    directory, at ``synchronous=NORMAL`` too: a new file's open makes that commit (it
    changes nothing), so the first save appends to a WAL already started. Opening an
    existing file still writes nothing."""
    path = tmp_path / "new.db"
    backend = SQLiteBackend(path, synchronous="NORMAL")
    started = _wal_header(path)
    assert len(started) == 32  # the header is written: the WAL is started
    with closing(_raw(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 0  # nothing changed
    await backend.append(request("a", 0, 1))
    assert _wal_header(path) == started  # appended to, not restarted (same salts)
    await backend.close()

    reopened = SQLiteBackend(path, synchronous="NORMAL")
    try:
        assert _wal_header(path) == b""  # (the last close removed it; the open wrote none)
        assert await reopened.head("a") == 1
    finally:
        await reopened.close()


async def _seed(path: Path) -> None:
    backend = SQLiteBackend(path)
    await backend.append(request("a", 0, 1))
    await backend.close()


def test_another_applications_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "invoices.db"
    with closing(_raw(path)) as other:
        other.execute("CREATE TABLE invoices (n INTEGER)")
        other.execute("INSERT INTO invoices VALUES (1)")
    before = path.read_bytes()
    with pytest.raises(NotAStore, match="without statekeeper's tables") as caught:
        SQLiteBackend(path)
    assert caught.value.location == str(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["invoices.db"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"", "empty \\(0 bytes\\)"), (b"hello, not a database" * 10, "not a SQLite database")],
)
def test_an_empty_or_foreign_file_never_becomes_an_empty_store(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "app.db"
    path.write_bytes(content)
    with pytest.raises(NotAStore, match=reason):
        SQLiteBackend(path)
    with pytest.raises(NotAStore):
        StateStore(f"sqlite:///{path}")
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


async def test_reopen_keeps_data_and_snapshots(tmp_path: Path) -> None:
    db = tmp_path / "keep.db"
    backend = SQLiteBackend(db)
    await backend.append(request("a", 0, 3, key="k", snap_at=3))
    await backend.close()
    backend = SQLiteBackend(db, synchronous="NORMAL")
    try:
        assert await backend.head("a") == 3
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert (await backend.health()).detail["synchronous"] == "NORMAL"
    finally:
        await backend.close()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"this is a text file, not a database\n" * 200, id="text"),
        pytest.param(b"SQLite format 3\x00" + b"\xff" * 4080, id="bad-header"),
    ],
)
def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises((IntegrityError, BackendError, NotAStore)) as info:
        SQLiteBackend(path)
    assert not isinstance(info.value, sqlite3.Error)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content  # refused, not "repaired"


def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    asyncio.run(SQLiteBackend(path).close())
    with closing(_raw(path)) as conn:
        conn.execute("UPDATE sk_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ConfigurationError, match="schema version 99"):
        SQLiteBackend(path)
    # read-only too (was: read as if of this version: the CLI's reads, the inspector),
    # and so the CLI's commands, which open read-only
    with pytest.raises(ConfigurationError, match="schema version 99; this statekeeper reads"):
        SQLiteBackend(path, readonly=True)
    with pytest.raises(ConfigurationError, match="schema version 99"):
        open_backend(f"sqlite:///{path}", readonly=True)


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_needs_a_file(path: str) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteBackend(path)


def test_unknown_synchronous_mode(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteBackend(tmp_path / "x.db", synchronous="SOMETIMES")  # type: ignore[arg-type]


async def test_a_locked_database_is_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    backend = SQLiteBackend(path, busy_timeout=0.05)
    try:
        await backend.append(request("a", 0))
        with closing(_raw(path)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            with pytest.raises(BackendError) as info:
                await backend.append(request("a", 1))
            assert info.value.maybe_applied is False
            other.execute("ROLLBACK")
        assert await backend.head("a") == 1
        assert await backend.append(request("a", 1)) == AppendResult("a", 2, 2)
    finally:
        await backend.close()


async def test_a_constraint_failure_leaves_no_partial_append(tmp_path: Path) -> None:
    # Damage the file so that the head says "new agent" while event 2 still exists:
    # appending seqs 1..2 then inserts seq 1 and fails on seq 2. Nothing may stay.
    path = tmp_path / "damaged.db"
    backend = SQLiteBackend(path)
    try:
        await backend.append(request("a", 0, 2))
        with closing(_raw(path)) as conn:
            conn.execute("DELETE FROM sk_agents WHERE agent_id = 'a'")
            conn.execute("DELETE FROM sk_events WHERE agent_id = 'a' AND seq = 1")
        with pytest.raises(BackendError):
            await backend.append(request("a", 0, 2, key="k"))
        with closing(_raw(path)) as conn:
            seqs = [r[0] for r in conn.execute("SELECT seq FROM sk_events ORDER BY seq")]
            agents = conn.execute("SELECT count(*) FROM sk_agents").fetchone()[0]
            keys = conn.execute("SELECT count(*) FROM sk_idempotency").fetchone()[0]
        assert (seqs, agents, keys) == ([2], 0, 0)
    finally:
        await backend.close()


async def test_a_constraint_failure_in_a_batch_fails_that_append_only(tmp_path: Path) -> None:
    # The same damage, inside a batch: the batch runs without a savepoint per append,
    # so the constraint firing after "a" wrote rows makes it redo the batch with
    # savepoints — "a" fails alone and leaves nothing; the others commit.
    path = tmp_path / "damaged.db"
    backend = SQLiteBackend(path)
    try:
        await backend.append(request("a", 0, 2))
        with closing(_raw(path)) as conn:
            conn.execute("DELETE FROM sk_agents WHERE agent_id = 'a'")
            conn.execute("DELETE FROM sk_events WHERE agent_id = 'a' AND seq = 1")
        results = await backend.append_batch(
            [request("b", 0), request("a", 0, 2, key="k"), request("c", 0, 3)]
        )
        assert results[0] == AppendResult("b", 1, 1)
        assert isinstance(results[1], BackendError)
        assert results[2] == AppendResult("c", 1, 3)
        with closing(_raw(path)) as conn:
            seqs = [r[0] for r in conn.execute("SELECT seq FROM sk_events WHERE agent_id = 'a'")]
            heads = dict(conn.execute("SELECT agent_id, head_seq FROM sk_agents").fetchall())
            keys = conn.execute("SELECT count(*) FROM sk_idempotency").fetchone()[0]
        assert (seqs, heads, keys) == ([2], {"b": 1, "c": 3}, 0)
    finally:
        await backend.close()


async def test_health_reports_the_file(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "h.db")
    try:
        await backend.append(request("a", 0, 50))
        health = await backend.health()
        assert health.ok
        assert health.detail["path"] == str(tmp_path / "h.db")
        assert health.detail["bytes"] > 0
    finally:
        await backend.close()


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


async def test_a_new_file_has_small_pages_that_hold_large_states(tmp_path: Path) -> None:
    """A new store file is made with :data:`PAGE_SIZE` pages (a commit checksums and
    copies every page it dirties: smaller pages, less CPU per save), and states far
    larger than a page (overflow chains) save and load whole."""
    db = tmp_path / "pages.db"
    big = {"messages": ["m" * 3000 + str(i) for i in range(40)]}  # ~120 KB
    async with StateStore(f"sqlite:///{db}", snapshot_every=3) as store:
        for n in range(1, 8):
            await store.save("a", {"messages": big["messages"][: n * 5]})
    assert _page_size(db) == PAGE_SIZE < 4096
    async with StateStore(f"sqlite:///{db}") as store:
        assert (await store.load("a")).data == {"messages": big["messages"][:35]}


async def test_a_file_made_with_4096_byte_pages_still_opens_and_takes_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files written before PAGE_SIZE (4096-byte pages, SQLite's default) keep their
    page size and work as before: loads, saves after a reopen, snapshots."""
    db = tmp_path / "old.db"
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_opening, "PAGE_SIZE", 4096)  # (the file is created with it)
        async with StateStore(f"sqlite:///{db}", snapshot_every=4) as store:
            for n in range(1, 7):
                await store.save("a", {"n": n, "text": "x" * 5000})
    assert _page_size(db) == 4096
    async with StateStore(f"sqlite:///{db}", snapshot_every=4) as store:
        assert (await store.load("a")).data == {"n": 6, "text": "x" * 5000}
        for n in range(7, 12):
            await store.save("a", {"n": n, "text": "y" * 5000})
    async with StateStore(f"sqlite:///{db}") as store:
        assert (await store.load("a")).data == {"n": 11, "text": "y" * 5000}
        assert [e.seq async for e in store.history("a")] == list(range(1, 12))
    assert _page_size(db) == 4096
