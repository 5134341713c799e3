"""The WAL file grown ahead (issue 11, full11, group11): a store at
``synchronous=FULL`` grows its WAL file with zeros, a step of ``GROW_STEP`` frames
ahead of the frames written at a time, so that the commits before the WAL's first
restart overwrite bytes the file holds instead of extending it; SQLite ignores the
zeros (a frame counts only with the WAL header's salt and a matching checksum)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import CHECKPOINT_PAGES, SQLiteBackend
from statekeeper.backends.sqlite import wal as sqlite_wal
from statekeeper.backends.sqlite.wal import GROW_CAP, GROW_STEP
from statekeeper.store import StateStore


def _wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _grown_size(page_size: int, frames: int = GROW_CAP) -> int:
    return sqlite_wal.WAL_HEADER + frames * (page_size + sqlite_wal.FRAME_HEADER)


def _page_size(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def _step_sizes(page_size: int) -> set[int]:
    """The WAL file's sizes a step of the growth leaves: a multiple of GROW_STEP
    frames, or the cap."""
    steps = [GROW_STEP * k for k in range(1, GROW_CAP // GROW_STEP + 1)] + [GROW_CAP]
    return {_grown_size(page_size, frames) for frames in steps}


async def test_a_full_store_grows_its_wal_ahead_in_steps_and_never_past_them(
    tmp_path: Path,
) -> None:
    """Within the first 16 saves the WAL file is grown one step (after GROW_AT_PAGES
    estimated pages, on the writer thread; the next save queues behind it), not to
    the cap at once; 480 lone chat saves (~2,700 frames, past the estimate's check
    against the WAL's frames and two checkpoints) see it grow step by step, and no
    commit ever extends it past a step: the first checkpoint still comes at
    ~CHECKPOINT_PAGES frames written, counted off the frames, not the file's size."""
    db = tmp_path / "grown.db"
    store = StateStore(f"sqlite:///{db}?synchronous=FULL", durability="sync")
    try:
        history: dict[str, list[str]] = {f"agent-{i}": [] for i in range(8)}
        sizes: list[int] = []
        for step in range(60):
            for agent_id, messages in history.items():
                messages.append(f"{agent_id} says {step}: " + "x" * 280)
                await store.save(agent_id, {"messages": list(messages)})
                sizes.append(_wal_size(db))
        page_size = _page_size(db)
        steps = _step_sizes(page_size)
        assert _grown_size(page_size, GROW_STEP) <= sizes[15] < _grown_size(page_size)
        assert set(sizes[15:]) <= steps, sorted(set(sizes[15:]) - steps)  # never extended
        assert len(set(sizes[15:])) >= 3, sorted(set(sizes))  # step by step
        assert sizes[15:] == sorted(sizes[15:])
        # the checkpoints ran: the WAL's frames since the last restart
        frames = sqlite_wal.wal_frames(f"{db}-wal", page_size)
        assert 0 < frames <= 1.25 * CHECKPOINT_PAGES, frames
        for agent_id, messages in history.items():
            assert (await store.load(agent_id)).data["messages"] == messages
    finally:
        await store.close()
    async with StateStore(f"sqlite:///{db}") as again:
        assert (await again.verify()).ok
        assert (await again.load("agent-3")).data["messages"] == history["agent-3"]


async def test_big_commits_are_not_grown_for(tmp_path: Path) -> None:
    """Commits of ~100 pages each (a state of ~200 KB that changes whole) extend the
    WAL by ~200 KB each, enough to spread the file system's journal commit over: the
    WAL file is not grown ahead of them with zeros that would double the bytes
    written. Its size stays that of the frames written."""
    db = tmp_path / "big.db"
    async with StateStore(f"sqlite:///{db}?synchronous=FULL", durability="sync") as store:
        for n in range(6):
            await store.save("a", {"n": n, "blob": os.urandom(100_000).hex()})
        page_size = _page_size(db)
        frames = sqlite_wal.wal_frames(f"{db}-wal", page_size)
        assert frames >= 6 * 48, frames  # (the commits were big)
        assert _wal_size(db) == _grown_size(page_size, frames)
        assert (await store.load("a")).data["n"] == 5


async def test_a_step_that_finds_the_write_lock_held_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step takes the file's write lock without waiting (it would hold up the
    saves queued behind it): when another connection holds it, the step is made a
    few saves later instead of never."""
    db = tmp_path / "held.db"
    grow_wal = SQLiteBackend._grow_wal
    attempts: list[int] = []

    def held_once(self: SQLiteBackend) -> None:
        attempts.append(_wal_size(db))
        if len(attempts) > 1:
            return grow_wal(self)
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
            grow_wal(self)
            other.execute("ROLLBACK")
        finally:
            other.close()

    monkeypatch.setattr(SQLiteBackend, "_grow_wal", held_once)
    async with StateStore(f"sqlite:///{db}?synchronous=FULL", durability="sync") as store:
        for n in range(40):
            await store.save("a", {"n": n, "pad": "x" * 300})
        page_size = _page_size(db)
        assert len(attempts) >= 2, attempts
        assert attempts[0] < _grown_size(page_size, GROW_STEP)  # the first found it held
        assert _wal_size(db) in _step_sizes(page_size)  # a later one grew it
        assert (await store.load("a")).data["n"] == 39


_CHILD = Path(__file__).with_name("_wal_crash_child.py")

#: saves the child makes at most before its WAL is grown two steps (~25 it takes)
_SAVES_CAP = 400


def _saves_until_killed(db: Path, grown_frames: int, mode: str) -> tuple[list[dict[str, Any]], int]:
    """Run :data:`_CHILD` saving to ``db`` at ``synchronous=FULL``, one save at a time:
    each save is asked for once the last was acknowledged and the WAL file checked,
    so the child is never ahead of this check. Five saves after its WAL file reached
    ``grown_frames`` frames of room, the next save is asked for with ``mode``
    (``stop`` or ``pass``: the child's docstring) and the child SIGKILLed as that
    save's COMMIT begins. Returns its acknowledgements (a ``pass`` save's own among
    them when it got that far before the kill) and the WAL's size then."""
    proc = subprocess.Popen(
        [sys.executable, str(_CHILD), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    acks: list[dict[str, Any]] = []
    grown = _grown_size(2048, grown_frames)
    past = 0
    size = -1
    try:
        for _ in range(_SAVES_CAP):
            # (a save queued behind a growth step in flight sees it done: past counts
            # from the save that found the step made, one save late at most)
            if _wal_size(db) >= grown:
                past += 1
            word = mode if past > 5 else "save"
            proc.stdin.write(word.encode() + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            assert line.endswith(b"\n"), f"the child died:\n{proc.stderr.read().decode()}"
            told = json.loads(line)
            if word != "save":
                assert told == {"commit": acks[-1]["n"] + 1}, told
                size = _wal_size(db)  # (a "stop" child is stopped: the file is still)
                proc.send_signal(signal.SIGKILL)  # mid-save, as its COMMIT begins
                break
            acks.append(told)
    finally:
        if proc.poll() is None:
            proc.kill()
        rest, stderr = proc.communicate()
    for line in rest.splitlines(keepends=True):  # a "pass" save acknowledged before the kill
        if line.endswith(b"\n"):
            acks.append(json.loads(line))
    assert size >= 0, f"the WAL never reached {grown_frames} frames:\n{stderr.decode()}"
    assert proc.returncode == -signal.SIGKILL, stderr.decode()
    return acks, size


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
@pytest.mark.timeout(180)
async def test_a_process_killed_after_its_wal_grew_in_steps_loses_no_acknowledged_save(
    tmp_path: Path,
) -> None:
    """A writer SIGKILLed mid-save a few saves after its WAL's second step (the file
    mostly zeros past its last frame, grown in steps, not to the cap): SQLite's
    recovery of that WAL loses no acknowledged save, the file reopens clean, and a
    second process's WAL, grown on the same file, is recovered as well. The first is
    killed exactly as its save's COMMIT begins (the save not in the file: the head is
    the last save acknowledged); the second as it goes on with that COMMIT, wherever
    the kill finds it (the save in the file or not: the head is one of the two).
    (A SIGKILL leaves the kernel's page cache: the growth's fdatasync is not what
    this checks, a growth that writes over frames or the WAL's header is.)"""
    db = tmp_path / "killed.db"
    acked: list[dict[str, Any]] = []
    for mode in ("stop", "pass"):
        new, size = _saves_until_killed(db, 2 * GROW_STEP, mode)
        assert _grown_size(2048, 2 * GROW_STEP) <= size < _grown_size(2048), size
        assert size in _step_sizes(2048), size
        acked.extend(new)
        with sqlite3.connect(db) as conn:  # (SQLite recovers the WAL on this open)
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        async with StateStore(f"sqlite:///{db}") as store:
            assert (await store.verify()).ok
            head = await store.load("a")
            last = acked[-1]["n"]
            if mode == "stop":
                assert head.data["n"] == last, (head.data["n"], acked[-1])
            else:
                assert head.data["n"] in (last, last + 1), (head.data["n"], acked[-1])
            assert head.data["messages"][-1].startswith(f"message {head.data['n']}: ")
            for ack in acked[-20:]:
                state = await store.load("a", at_seq=ack["seq"])
                assert state.data["n"] == ack["n"], ack


@pytest.mark.parametrize("sync", ["NORMAL", "OFF"])
async def test_a_store_without_a_sync_per_commit_leaves_its_wal_to_sqlite(
    tmp_path: Path, sync: str
) -> None:
    """Where no commit syncs the WAL, a grown file would save nothing: not grown."""
    db = tmp_path / "plain.db"
    async with StateStore(f"sqlite:///{db}?synchronous={sync}", durability="sync") as store:
        for n in range(40):  # past GROW_AT_PAGES estimated pages
            await store.save("a", {"n": n, "pad": "x" * 300})
        page_size = _page_size(db)
        frames = sqlite_wal.wal_frames(f"{db}-wal", page_size)
        assert 0 < _wal_size(db) == _grown_size(page_size, frames)  # the frames only


def _rows(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return [r[0] for r in conn.execute("SELECT n FROM t ORDER BY n")]


@pytest.mark.parametrize("frames_first", [0, 40])
def test_sqlite_reads_a_grown_wal_left_by_a_crash_to_its_last_commit(
    tmp_path: Path, frames_first: int
) -> None:
    """The files as a crash leaves them (copied while the writer is open, no
    checkpoint, no ``-shm``: SQLite recovers the WAL from its frames): every commit
    before and after the growth is read, the zeros past the last frame are not —
    whether the WAL held frames when it was grown or only its header."""
    db = tmp_path / "w.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA page_size = 2048")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t(n INTEGER PRIMARY KEY, pad BLOB)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL empty: only what follows
    for n in range(frames_first):
        conn.execute("INSERT INTO t VALUES (?, randomblob(900))", (n,))
    conn.execute("BEGIN IMMEDIATE")
    added = sqlite_wal.grow(f"{db}-wal", 300, 2048)
    conn.execute("ROLLBACK")
    assert added > 0 and _wal_size(db) == _grown_size_for(300, 2048)
    assert sqlite_wal.grow(f"{db}-wal", 300, 2048) == 0  # (large enough: untouched)
    for n in range(frames_first, frames_first + 60):
        conn.execute("INSERT INTO t VALUES (?, randomblob(900))", (n,))
    frames = sqlite_wal.wal_frames(f"{db}-wal", 2048)
    assert frames_first + 60 <= frames < 300  # inside the grown file, the zeros not counted
    assert _wal_size(db) == _grown_size_for(300, 2048)  # overwritten, not extended
    crash = tmp_path / "crash"
    crash.mkdir()
    shutil.copyfile(db, crash / "w.db")
    shutil.copyfile(f"{db}-wal", crash / "w.db-wal")
    assert _rows(crash / "w.db") == list(range(frames_first + 60))
    conn.close()
    assert _rows(db) == list(range(frames_first + 60))


def _grown_size_for(frames: int, page_size: int) -> int:
    return sqlite_wal.WAL_HEADER + frames * (page_size + sqlite_wal.FRAME_HEADER)


def test_grow_leaves_a_missing_wal_to_sqlite(tmp_path: Path) -> None:
    assert sqlite_wal.grow(str(tmp_path / "none.db-wal"), 10, 2048) == 0
    assert not (tmp_path / "none.db-wal").exists()
    assert sqlite_wal.wal_frames(str(tmp_path / "none.db-wal"), 2048) == 0


def _shm_locks(db: Path) -> set[tuple[str, str]]:
    """This process's POSIX locks on ``db``'s ``-shm`` file: (mode, first byte)."""
    return _locks(Path(f"{db}-shm"))


def _locks(file: Path) -> set[tuple[str, str]]:
    """This process's POSIX locks on ``file``: (mode, first byte)."""
    inode = os.stat(file).st_ino
    held = set()
    with open("/proc/locks", encoding="ascii") as fh:
        for line in fh:
            fields = line.split()
            if fields[1] != "POSIX" or fields[4] != str(os.getpid()):
                continue
            if int(fields[5].rsplit(":", 1)[1]) == inode:
                held.add((fields[3], fields[6]))
    return held


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
async def test_counting_the_wals_frames_keeps_sqlites_locks(tmp_path: Path) -> None:
    """The store counts the WAL's frames when its writer opens and to calibrate its
    checkpoints. SQLite keeps its locks on the ``-shm`` file, and closing any
    descriptor of that file drops every POSIX lock the process holds on it: the one
    that keeps another process from truncating ``-shm`` under this one's map (its
    connections then die of SIGBUS) among them. After saves past the calibration,
    the process still holds the lock SQLite took when it opened the file."""
    db = tmp_path / "locks.db"
    async with StateStore(f"sqlite:///{db}?synchronous=FULL", durability="sync") as store:
        await store.save("a", {"n": 0})
        opened = _shm_locks(db)
        assert opened, "SQLite holds locks on -shm while the store is open"
        for n in range(1, 120):  # past GROW_AT_PAGES and CALIBRATE_PAGES
            await store.save("a", {"n": n, "pad": "x" * 600})
        assert opened <= _shm_locks(db)
        assert (await store.load("a")).data["n"] == 119


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
def test_a_page_snapshot_keeps_the_processs_locks_on_the_wal_index(tmp_path: Path) -> None:
    """A page backup reads the wal-index (``-shm``) while its readers hold their read
    transactions; this process's other connections hold SQLite's locks on that file
    too. Reading it must drop none of them (a close of any descriptor of the file
    would): without its read lock a reader's pages can be checkpointed over by
    another process, and without the open lock the file can be truncated under the
    connection's map."""
    from statekeeper.backends.sqlite.snapopen import open_snapshot

    db = tmp_path / "pages.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t(n INTEGER PRIMARY KEY, pad BLOB)")
    for n in range(20):
        conn.execute("INSERT INTO t VALUES (?, randomblob(500))", (n,))
    conn.execute("BEGIN")
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 20  # a read lock
    held = _shm_locks(db)
    assert held, "SQLite holds locks on -shm while the connection reads"
    snapshot = open_snapshot(str(db), 5.0)
    try:
        assert snapshot is not None
        assert held <= _shm_locks(db)
        db_held = _locks(db)
        assert db_held, "a connection with the WAL open holds a lock on the database file"
        snapshot.close()
        snapshot = None
        assert db_held <= _locks(db)  # the snapshot's own descriptor was not closed
    finally:
        if snapshot is not None:
            snapshot.close()
        conn.execute("COMMIT")
        conn.close()


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
async def test_opening_a_second_store_on_a_file_keeps_the_firsts_locks(tmp_path: Path) -> None:
    """Opening a store checks the file's header before SQLite touches it; another
    connection of this process may have the file open, holding the shared lock that
    tells a closing process's last connection not to checkpoint and delete the WAL.
    Reading the header must not drop it (a close of any descriptor of the file would)."""
    db = tmp_path / "two.db"
    async with StateStore(f"sqlite:///{db}") as first:
        await first.save("a", {"n": 1})
        held = _locks(db)
        assert held, "a connection with the WAL open holds a lock on the database file"
        async with StateStore(f"sqlite:///{db}") as second:
            assert (await second.load("a")).data == {"n": 1}
            assert held <= _locks(db)
        assert held <= _locks(db)
        await first.save("a", {"n": 2})
