"""The floor of one durable save on SQLite, and where the database part of ours goes
(issue 11): one run, every side side by side.

Sides:

- ``bare``: ``BEGIN IMMEDIATE; INSERT one row; COMMIT`` through Python's ``sqlite3``
  on a one-table file (``k INTEGER PRIMARY KEY, v BLOB``), the row as large as one of
  our event rows (:data:`ROW_BYTES`): the one-statement floor;
- ``sk``: ``StateStore.save`` (``durability="sync"``), chat states as in
  :mod:`bench_save_instructions` (~300-character messages, one more per save);
- ``lg``: LangGraph ``SqliteSaver.put`` of the same states (the peer);
- statement replays, on a file made by :class:`~statekeeper.backends.sqlite.SQLiteBackend`
  (its schema, triggers and pragmas), through one cursor as the backend runs them, with
  rows of the sizes a save writes (payload :data:`PAYLOAD`, checksum 32, head tag 34
  bytes): ``txn`` (``BEGIN IMMEDIATE; COMMIT`` only), ``now`` (what a save runs today:
  the head's compare-and-set ``UPDATE sk_agents``, the ``INSERT INTO sk_events`` whose
  trigger adds the ``sk_feed`` row, ``COMMIT``), ``now-no-feed`` (the trigger dropped),
  ``now-no-head`` (no ``UPDATE``), ``event`` (the event insert alone, no trigger),
  ``rowid-feed`` (today's head ``UPDATE``, the event row's rowid as the feed position:
  :data:`ROWID_FEED_DDL`, no feed table or trigger), ``rowid-plain`` (the same without
  ``AUTOINCREMENT``: a position freed by a delete would be handed out again unless the
  deletes kept the largest row, e.g. as a tombstone);
- the one-row design, replayed on its own schema (:data:`ONE_ROW_DDL`: the event row
  carries the head tag, the feed position is the rowid, ``UNIQUE(agent_id, seq)``):
  ``one-row`` (the compare-and-set is ``INSERT … SELECT … WHERE EXISTS`` the expected
  previous row with the expected tag; SQLite runs an ``INSERT`` that reads its own
  table through a temporary table), ``one-row-select`` (the check a ``SELECT`` of its
  own, then ``INSERT … VALUES``: two statements, one row), ``one-row-ai`` (``one-row``
  with ``AUTOINCREMENT``, so that a position is never handed out twice after a
  delete) and ``one-row-wr``
  (a ``WITHOUT ROWID`` table keyed by ``(agent_id, seq)``: one B-tree, no feed
  position; the floor of any layout that keys events by agent).

``--instructions``: instructions per op under ``valgrind --tool=callgrind`` (every
thread, ``synchronous=OFF``: the kernel's fsync is not counted anyway), the difference
of a ``--small`` and a ``--large`` run over the ops between them (start-up cancels).
``--wall``: ops/s and CPU per op (``process_time``) at ``FULL`` and ``NORMAL``, every
side in the same process, interleaved round by round (the order rotates), median and
min..max over ``--rounds``.

    .venv/bin/python benchmarks/bench_save_floor.py --instructions --wall
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload, lg_config, lg_open, lg_plan, table

CHARS = 300
FIRST = 10
AGENTS = 4
#: every run builds the same workload (its cost cancels in the instruction difference)
STEPS = 80
PAYLOAD = 420  # bytes of one event's payload in the sk workload (measured: 415-420)
#: one event row of ours: agent id (9), seq, kind ('patch'), ts, payload, checksum (32)
ROW_BYTES = 9 + 8 + 5 + 8 + PAYLOAD + 32
TAG = 34  # bytes of a head tag

SQL_SIDES = (
    "txn",
    "event",
    "now-no-head",
    "now-no-feed",
    "now",
    "rowid-feed",
    "rowid-plain",
    "one-row",
    "one-row-select",
    "one-row-ai",
    "one-row-wr",
)
SIDES = ("bare", *SQL_SIDES, "minimal", "minimal-detect", "sk", "sk-main", "lg")

_CLAIM = (
    "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
    " WHERE agent_id = ? AND head_seq = ? AND head_tag IS ?"
)
_CREATE = (
    "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO NOTHING"
)
_INSERT_EVENT = (
    "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum) VALUES (?, ?, ?, ?, ?, ?)"
)

#: the layout a save ran on before this branch (schema 4 of ``backends/sqlite.py`` and
#: ``backends/sqlite/feed.py`` at main ``b2b9a87``), pinned here so that the replays do
#: not move with the source tree
V4_DDL = """
CREATE TABLE sk_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sk_agents (
    agent_id TEXT PRIMARY KEY, head_seq INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, head_tag BLOB) WITHOUT ROWID;
CREATE INDEX sk_agents_written ON sk_agents (updated_at, agent_id);
CREATE TABLE sk_events (
    agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
    payload BLOB NOT NULL, checksum BLOB NOT NULL, PRIMARY KEY (agent_id, seq));
CREATE TABLE sk_feed (position INTEGER PRIMARY KEY, agent_id TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE sk_feed_deleted (agent_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER sk_feed_append AFTER INSERT ON sk_events BEGIN
    INSERT INTO sk_feed (agent_id, seq) VALUES (new.agent_id, new.seq);
END;
"""

#: the one-row design's event table (a sketch for measurement: the statement a save
#: would run, on the layout it would run on)
ONE_ROW_DDL = {
    "one-row": """CREATE TABLE sk_log (
        position INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
        payload BLOB NOT NULL, checksum BLOB NOT NULL, tag BLOB,
        UNIQUE (agent_id, seq))""",
    "one-row-ai": """CREATE TABLE sk_log (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
        payload BLOB NOT NULL, checksum BLOB NOT NULL, tag BLOB,
        UNIQUE (agent_id, seq))""",
    "one-row-wr": """CREATE TABLE sk_log (
        agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
        payload BLOB NOT NULL, checksum BLOB NOT NULL, tag BLOB,
        PRIMARY KEY (agent_id, seq)) WITHOUT ROWID""",
}
#: ``rowid-feed``: today's head row, the feed position the event row's own (never
#: reused: AUTOINCREMENT), no feed table or trigger
ROWID_FEED_DDL = """CREATE TABLE sk_events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
    payload BLOB NOT NULL, checksum BLOB NOT NULL,
    UNIQUE (agent_id, seq))"""
_ONE_ROW_FIRST = (
    "INSERT INTO sk_log(agent_id, seq, kind, ts, payload, checksum, tag)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_ONE_ROW_CHECK = "SELECT 1 FROM sk_log WHERE agent_id = ? AND seq = ? AND tag IS ?"
_ONE_ROW_NEXT = (
    "INSERT INTO sk_log(agent_id, seq, kind, ts, payload, checksum, tag)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE EXISTS"
    " (SELECT 1 FROM sk_log WHERE agent_id = ?1 AND seq = ?2 - 1 AND tag IS ?8)"
)


class Replay:
    """One side's statements on its own file, through one cursor (as the backend)."""

    def __init__(self, side: str, path: Path, sync: str) -> None:
        self.side = side
        if side == "bare" or side in ONE_ROW_DDL or side == "one-row-select":
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            if side == "bare":
                conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
            else:
                conn.execute(ONE_ROW_DDL[side.replace("-select", "")])
        else:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(V4_DDL)
            if side in ("now-no-feed", "event", "rowid-feed", "rowid-plain"):
                conn.execute("DROP TRIGGER sk_feed_append")
            if side in ("rowid-feed", "rowid-plain"):  # the position: the event's rowid
                conn.execute("DROP TABLE sk_events")
                ddl = ROWID_FEED_DDL
                conn.execute(ddl if side == "rowid-feed" else ddl.replace(" AUTOINCREMENT", ""))
        conn.execute(f"PRAGMA synchronous={sync}")
        self.conn = conn
        self.cur = conn.cursor()
        self.payload = os.urandom(PAYLOAD)
        self.blob = os.urandom(ROW_BYTES)
        self.seq = dict.fromkeys(range(AGENTS), 0)
        self.tags = {a: os.urandom(TAG) for a in range(AGENTS)}
        self.n = 0

    def op(self) -> None:
        agent = self.n % AGENTS
        self.n += 1
        cur, side = self.cur, self.side
        cur.execute("BEGIN IMMEDIATE")
        if side == "bare":
            cur.execute("INSERT INTO t VALUES (?, ?)", (self.n, self.blob))
            cur.execute("COMMIT")
            return
        if side == "txn":
            cur.execute("COMMIT")
            return
        aid = f"agent-{agent:03d}"
        seq = self.seq[agent] + 1
        ts = time.time()
        checksum = os.urandom(32)
        tag, old = os.urandom(TAG), self.tags[agent]
        if side == "one-row-select":  # the check a statement of its own, then the row
            row = (aid, seq, "patch", ts, self.payload, checksum, tag)
            if seq > 1:
                found = cur.execute(_ONE_ROW_CHECK, (aid, seq - 1, old)).fetchone()
                assert found is not None
            cur.execute(_ONE_ROW_FIRST, row)
        elif side in ONE_ROW_DDL:
            row = (aid, seq, "patch", ts, self.payload, checksum, tag)
            if seq == 1:
                claimed = cur.execute(_ONE_ROW_FIRST, row).rowcount
            else:
                claimed = cur.execute(_ONE_ROW_NEXT, (*row, old)).rowcount
            assert claimed == 1
        else:
            if side in ("now", "now-no-feed", "rowid-feed", "rowid-plain"):
                if seq == 1:
                    claimed = cur.execute(_CREATE, (aid, seq, ts, ts, tag)).rowcount
                else:
                    claimed = cur.execute(_CLAIM, (seq, ts, tag, aid, seq - 1, old)).rowcount
                assert claimed == 1
            cur.execute(_INSERT_EVENT, (aid, seq, "patch", ts, self.payload, checksum))
        cur.execute("COMMIT")
        self.seq[agent] = seq
        self.tags[agent] = tag

    def run(self, ops: int) -> None:
        for _ in range(ops):
            self.op()

    def close(self) -> None:
        self.conn.close()


class SkSide:
    """``StateStore.save``, one agent at a time, on a private event loop."""

    def __init__(self, path: Path, sync: str, ops: int) -> None:
        from statekeeper import StateStore

        wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=CHARS)
        docs = {a: wl.docs(a) for a in wl.agent_ids}
        self.docs = [(a, docs[a][i]) for i in range(STEPS) for a in wl.agent_ids]
        self.loop = asyncio.new_event_loop()
        self.store = StateStore(f"sqlite:///{path}?synchronous={sync}", durability="sync")
        self.loop.run_until_complete(self.store.__aenter__())
        self.n = 0

    def run(self, ops: int) -> None:
        async def saves() -> None:
            for agent, doc in self.docs[self.n : self.n + ops]:
                await self.store.save(agent, doc)

        self.loop.run_until_complete(saves())
        self.n += ops

    def close(self) -> None:
        self.loop.run_until_complete(self.store.__aexit__(None, None, None))
        self.loop.close()


class LgSide:
    """LangGraph ``SqliteSaver.put`` of the same states."""

    def __init__(self, path: Path, sync: str, ops: int) -> None:
        wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=CHARS)
        self.saver = lg_open(path, sync)
        plans = {a: lg_plan(self.saver, wl.docs(a)) for a in wl.agent_ids}
        self.configs = {a: lg_config(a) for a in wl.agent_ids}
        self.steps = [(a, plans[a][i]) for i in range(STEPS) for a in wl.agent_ids]
        self.n = 0

    def run(self, ops: int) -> None:
        for agent, (cp, meta, versions) in self.steps[self.n : self.n + ops]:
            self.configs[agent] = self.saver.put(self.configs[agent], cp, meta, versions)
        self.n += ops

    def close(self) -> None:
        self.saver.conn.close()


#: the record header of a plain JSON body (version 1, format JSON, no compression, no
#: key: ``Codec._plain_headers[0]``), the chain link's domain, a keyless head tag's
#: prefix (``Codec.head_tag``): the stored format, pinned (``MinimalSide.check`` reads
#: every record back through ``StateStore.load``)
_MIN_HEADER = bytes((1, 0, 0))
_MIN_LINK = b"sk-link/1"
_MIN_TAG = b"\x01\x00"
_ZERO_LINK = bytes(32)
_MIN_CLAIM = (
    "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
    " WHERE agent_id = ? AND head_seq = ? AND head_tag IS ?"
)


class MinimalSide:
    """``minimal``: a save that keeps every guarantee ``StateStore.save`` keeps for this
    workload, with the least Python: raw ``sqlite3`` on a file the SQLite backend made
    (its schema, feed trigger, page size), one reused cursor, every statement, struct
    and prefix bound once. Per save: the JSON patch of the appended messages
    (``add /messages/-`` each; the first save a ``created`` event replacing the whole
    document) serialized by orjson as the store writes it; the record (header, previous
    link, body); its SHA-256 chain link over the record's identity (agent, type, seq,
    time) and bytes, stored as the checksum; the keyless head tag; ``BEGIN IMMEDIATE``, the head's
    compare-and-set on seq and tag (two writers never both win; seq gap-free), the
    event row (its trigger writes the feed row), ``COMMIT``. What it leaves out, and
    the store does not: the event loop (the peer has none either), change detection
    (``minimal`` trusts that the list only grew; ``minimal-detect`` proves it as the
    store does, packing the new list with msgpack and comparing its bytes with the
    previous save's), the cache of the state, the snapshot policy, the witness file.

    :meth:`check` reads every agent back through ``StateStore.load`` (the chain, the
    checksums and the head tag verified) and compares it with the last document saved.
    """

    def __init__(self, path: Path, sync: str, ops: int, detect: bool = False) -> None:
        wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=CHARS)
        docs = {a: wl.docs(a) for a in wl.agent_ids}
        self.docs = [(a, docs[a][i]) for i in range(STEPS) for a in wl.agent_ids]
        self.path = path
        if not path.exists():
            asyncio.run(minimal_file(path, sync))
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute(f"PRAGMA synchronous={sync}")
        self.n = 0
        self.last: dict[str, dict[str, Any]] = {}
        self.save = minimal_saver(self.conn, detect)

    def run(self, ops: int) -> None:
        save, last = self.save, self.last
        for agent, doc in self.docs[self.n : self.n + ops]:
            save(agent, doc)
            last[agent] = doc
        self.n += ops

    def check(self) -> None:
        asyncio.run(minimal_check(self.path, self.last))

    def close(self) -> None:
        self.conn.close()


async def minimal_file(path: Path, sync: str) -> None:
    """The file as the SQLite backend makes it (schema, trigger, pragmas)."""
    from statekeeper import StateStore

    async with StateStore(f"sqlite:///{path}?synchronous={sync}", witness=False):
        pass


async def minimal_check(path: Path, last: dict[str, dict[str, Any]]) -> None:
    """Every agent ``minimal`` wrote, read back by ``StateStore.load`` (chain, checksums
    and head tag verified), equals the last document saved; the feed holds one row
    per event, gap-free per agent."""
    from statekeeper import StateStore

    async with StateStore(f"sqlite:///{path}", witness=False, cache_size=0) as store:
        for agent, doc in last.items():
            state = await store.load(agent)
            if state.data != doc:
                raise SystemExit(f"minimal: {agent} reads back different")
    conn = sqlite3.connect(path)
    try:
        for agent in last:
            seqs = [
                r[0]
                for r in conn.execute(
                    "SELECT seq FROM sk_feed WHERE agent_id = ? ORDER BY position", (agent,)
                )
            ]
            if seqs != list(range(1, len(seqs) + 1)):
                raise SystemExit(f"minimal: {agent}'s feed rows are not 1..n")
    finally:
        conn.close()


def format_check(saves: int = 40) -> str:
    """``minimal`` and ``StateStore.save`` write the same documents to two files: every
    event row must be the same but for what depends on the time (the previous link in
    the record, the link, the timestamp): agent, seq, kind, record header and body
    bytes equal."""
    from statekeeper import StateStore

    with tempfile.TemporaryDirectory() as d:
        side = MinimalSide(Path(d) / "m.db", "NORMAL", saves)
        side.run(saves)
        side.check()
        side.close()

        async def store_saves() -> None:
            url = f"sqlite:///{Path(d) / 's.db'}"
            async with StateStore(url, durability="sync", witness=False) as store:
                for agent, doc in side.docs[:saves]:
                    await store.save(agent, doc)

        asyncio.run(store_saves())
        query = "SELECT agent_id, seq, kind, payload FROM sk_events ORDER BY agent_id, seq"
        rows = []
        for name in ("m.db", "s.db"):
            conn = sqlite3.connect(Path(d) / name)
            rows.append(conn.execute(query).fetchall())
            conn.close()
    mine, store = rows
    if len(mine) != len(store) or any(
        a[:3] != b[:3] or a[3][:3] != b[3][:3] or a[3][35:] != b[3][35:]
        for a, b in zip(mine, store, strict=True)
    ):
        raise SystemExit("minimal: its events are not the store's")
    return f"{len(mine)} events: agent, seq, kind, record header and body the store's"


def minimal_saver(conn: sqlite3.Connection, detect: bool) -> Callable[[str, dict[str, Any]], None]:
    """The ``minimal`` save as a closure over everything bound once (see
    :class:`MinimalSide`)."""
    import hashlib
    import struct

    import msgpack  # type: ignore[import-untyped]
    import orjson

    cur = conn.cursor()
    execute = cur.execute
    dumps, sha256, pack_seq_ts = orjson.dumps, hashlib.sha256, struct.Struct(">qd").pack
    packer = msgpack.Packer(strict_types=True, use_bin_type=True)
    pack = packer.pack
    clock = time.time
    # blobs bound as bytearray, as the backend binds them: sqlite3 binds bytearray
    # directly but looks bytes up in its adapters first (a formatted and cleared
    # AttributeError each; measured ~13k instructions a save for 4 blobs)
    blob = bytearray
    names: dict[str, bytes] = {}
    patch = b"\x00\x00\x00\x05patch"
    # agent -> (seq, link, tag, messages saved, their msgpack bytes)
    heads: dict[str, tuple[int, bytes, bytes, int, bytes]] = {}
    begin, commit, rollback = "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"
    create = (
        "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO NOTHING"
    )
    claim, insert = _MIN_CLAIM, _INSERT_EVENT

    def save(agent_id: str, doc: dict[str, Any]) -> None:
        msgs = doc["messages"]
        head = heads.get(agent_id)
        packed = pack(msgs) if detect else b""
        if head is None:
            # (the first save: a "created" event replacing the whole document, as the store)
            seq, prev, old_tag, kind = 1, _ZERO_LINK, b"", "created"
            body = dumps({"ops": [{"op": "replace", "path": "", "value": doc}]})
            prefix = len(agent_id).to_bytes(4, "big") + agent_id.encode()
            names[agent_id] = prefix + patch
            name = prefix + b"\x00\x00\x00\x07created"
        else:
            seq, prev, old_tag, n, before = head
            # (a msgpack array's header: 1 byte up to 15 items, 3 up to 65535)
            if detect and not packed.startswith(
                memoryview(before)[1 if before[0] < 0xDC else 3 :], 1 if packed[0] < 0xDC else 3
            ):
                raise ValueError("not an append")  # (the workload only appends)
            seq += 1
            kind = "patch"
            body = dumps(
                {"ops": [{"op": "add", "path": "/messages/-", "value": m} for m in msgs[n:]]}
            )
            name = names[agent_id]
        ts = clock()
        payload = _MIN_HEADER + prev + body
        link = sha256(_MIN_LINK + name + pack_seq_ts(seq, ts) + payload).digest()
        tag = _MIN_TAG + link
        execute(begin)
        try:
            if seq == 1:
                claimed = execute(create, (agent_id, 1, ts, ts, blob(tag))).rowcount
            else:
                claimed = execute(
                    claim, (seq, ts, blob(tag), agent_id, seq - 1, blob(old_tag))
                ).rowcount
            if claimed != 1:
                raise RuntimeError(f"{agent_id}: head moved")  # another writer won
            execute(insert, (agent_id, seq, kind, ts, blob(payload), blob(link)))
            execute(commit)
        except BaseException:
            if conn.in_transaction:
                execute(rollback)
            raise
        heads[agent_id] = (seq, link, tag, len(msgs), packed)

    return save


def make(side: str, path: Path, sync: str, ops: int) -> Any:
    if ops > AGENTS * STEPS:
        raise SystemExit(f"at most {AGENTS * STEPS} ops a run")
    if side in ("sk", "sk-main"):  # (sk-main: the same, run with PYTHONPATH at main)
        return SkSide(path, sync, ops)
    if side == "lg":
        return LgSide(path, sync, ops)
    if side in ("minimal", "minimal-detect"):
        return MinimalSide(path, sync, ops, detect=side == "minimal-detect")
    return Replay(side, path, sync)


# ------------------------------------------------------------------ instructions


def child(side: str, ops: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        s = make(side, Path(tmp) / "bench.db", "OFF", ops)
        try:
            s.run(ops)
        finally:
            s.close()
    return ops


def instructions(side: str, ops: int, main_src: str | None = None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                side,
                str(ops),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**_env(side, main_src), "PYTHONHASHSEED": "0"},
        )
        return sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", out.read_text(), re.M))


def per_op(side: str, small: int, large: int, main_src: str | None) -> float:
    return (instructions(side, large, main_src) - instructions(side, small, main_src)) / (
        large - small
    )


def _env(side: str, main_src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if side == "sk-main":
        if main_src is None:
            raise SystemExit("side sk-main needs --main-src")
        env["PYTHONPATH"] = main_src
    return env


# ------------------------------------------------------------------ wall and CPU


def wall_child(side: str, sync: str, ops: int) -> tuple[float, float]:
    """(ops/s, CPU seconds per op) of ``ops`` ops of ``side`` after 20 warm-up ops."""
    with tempfile.TemporaryDirectory() as tmp:
        s = make(side, Path(tmp) / "bench.db", sync, ops + 20)
        try:
            s.run(20)  # warm-up: statement cache, first pages
            c0, t0 = time.process_time(), time.perf_counter()
            s.run(ops)
            t1, c1 = time.perf_counter(), time.process_time()
        finally:
            s.close()
    return ops / (t1 - t0), (c1 - c0) / ops


def wall(
    sides: list[str], syncs: list[str], rounds: int, ops: int, main_src: str | None
) -> dict[str, Any]:
    """Each side's run in a fresh worker process (``sk-main``: ``PYTHONPATH`` at
    ``main_src``, the tree before), sides interleaved round by round, order rotating."""
    res: dict[str, dict[str, list[tuple[float, float]]]] = {
        s: {side: [] for side in sides} for s in syncs
    }
    for r in range(rounds):
        for sync in syncs:
            for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
                env = _env(side, main_src)
                proc = subprocess.run(
                    [sys.executable, __file__, "--wall-child", side, sync, str(ops)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                )
                rate, cpu = json.loads(proc.stdout.strip().splitlines()[-1])
                res[sync][side].append((rate, cpu))
    return res


# ------------------------------------------------------------------ interleaved, as bench_hotpath

SEQ_SIDES = ("sk", "lg", "bare", "minimal", "minimal-detect")


async def seq_round(tmp: Path, tag: str, sync: str, wl: Workload, first: int) -> dict[str, Any]:
    """``bench_hotpath.seq_round`` with the ``minimal`` sides added to its rotation: every
    step of every agent runs one op of each side, in an order that rotates per op; CPU
    is ``process_time`` around each call (the whole process). Each minimal file is then
    read back by ``StateStore.load`` (``minimal_check``)."""
    from bench_hotpath import seq_round as hot_round

    minimal = {}
    for side in ("minimal", "minimal-detect"):
        path = tmp / f"seq-{side}-{tag}.db"
        await minimal_file(path, sync)
        minimal[side] = MinimalSide(path, sync, 0, detect=side == "minimal-detect")
    try:
        out = await hot_round(tmp, tag, sync, wl, first, {s: m.save for s, m in minimal.items()})
        for m in minimal.values():
            m.last = {a: wl.docs(a)[-1] for a in wl.agent_ids}
    finally:
        for m in minimal.values():
            m.close()
    for m in minimal.values():
        await minimal_check(m.path, m.last)
    return {side: {k: v for k, v in out[side].items() if k != "lat"} for side in SEQ_SIDES}


async def seq(syncs: list[str], rounds: int, agents: int, last: int) -> dict[str, Any]:
    """Rounds of :func:`seq_round` per ``synchronous`` (``--quick``: 4 agents, 10 -> 30
    messages, 2 rounds)."""
    wl = Workload(agents, FIRST, last, chars=CHARS)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sk-floor-") as d:
        for sync in syncs:
            out[sync] = [
                await seq_round(Path(d), f"{sync}-{r}", sync, wl, first=r) for r in range(rounds)
            ]
    return out


def seq_table(res: dict[str, Any]) -> str:
    rows = []
    for sync, rounds in res.items():
        for side in SEQ_SIDES:
            rows.append(
                [
                    sync,
                    side,
                    _spread([r[side]["rate"] for r in rounds], lambda x: f"{x:,.0f}"),
                    _spread([r[side]["cpu_us"] for r in rounds], lambda x: f"{x:,.0f}"),
                    _spread(
                        [r[side]["rate"] / r["lg"]["rate"] for r in rounds], lambda x: f"{x:.2f}x"
                    ),
                    _spread(
                        [r[side]["cpu_us"] / r["lg"]["cpu_us"] for r in rounds],
                        lambda x: f"{x:.2f}x",
                    ),
                ]
            )
    return table(["sync", "side", "saves/s", "CPU us/save", "rate vs lg", "CPU vs lg"], rows)


def _spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}..{fmt(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "OPS"))
    parser.add_argument("--sides", nargs="+", default=list(SIDES))
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--wall-child", nargs=3, metavar=("SIDE", "SYNC", "OPS"))
    parser.add_argument("--main-src", help="the tree before (side sk-main): its src folder")
    parser.add_argument(
        "--seq",
        action="store_true",
        help="bench_hotpath's sequential rows (interleaved per op) with the minimal sides",
    )
    parser.add_argument(
        "--check-format",
        action="store_true",
        help="the minimal's event rows against StateStore.save's for the same documents",
    )
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--last", type=int, default=30)
    args = parser.parse_args()
    if args.child:
        print(child(args.child[0], int(args.child[1])))
        return
    if args.wall_child:
        side, sync, ops = args.wall_child
        print(json.dumps(wall_child(side, sync, int(ops))))
        return
    out: dict[str, Any] = {"load": os.getloadavg()}
    if args.check_format:
        print(format_check())
    if args.seq:
        res = asyncio.run(seq(args.sync, args.rounds, args.agents, args.last))
        out["seq"] = res
        print(f"{args.rounds} rounds, median (min..max); minimal read back by StateStore.load")
        print(seq_table(res))
        print(f"\nload {out['load']} -> {os.getloadavg()}")
    if args.instructions:
        ins = {side: per_op(side, args.small, args.large, args.main_src) for side in args.sides}
        out["instructions"] = ins
        peer, floor = ins.get("lg"), ins.get("bare")
        rows = [
            [
                side,
                f"{n:,.0f}",
                f"{n / floor:.2f}x" if floor else "-",
                f"{n / peer:.2f}x" if peer else "-",
            ]
            for side, n in ins.items()
        ]
        print(table(["side", "instructions per op", "vs bare", "vs lg"], rows))
    if args.wall:
        res = wall(args.sides, args.sync, args.rounds, args.ops, args.main_src)
        out["wall"] = res
        for sync, sides in res.items():
            peer_rates = [r for r, _ in sides.get("lg", [])]
            rows = []
            for side, runs in sides.items():
                rates, cpus = [r for r, _ in runs], [c for _, c in runs]
                ratio = (
                    "-"
                    if not peer_rates
                    else _spread(
                        [a / b for a, b in zip(rates, peer_rates, strict=True)],
                        lambda x: f"{x:.2f}x",
                    )
                )
                rows.append(
                    [
                        side,
                        _spread(rates, lambda x: f"{x:,.0f}"),
                        _spread([c * 1e6 for c in cpus], lambda x: f"{x:,.0f}"),
                        ratio,
                    ]
                )
            print(
                f"\nsynchronous={sync}, {args.rounds} rounds of {args.ops} ops, median (min..max)"
            )
            print(table(["side", "ops/s", "CPU us per op", "rate vs lg (same round)"], rows))
        out["load_after"] = os.getloadavg()
        print(f"\nload {out['load']} -> {out['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
