"""The floor of a materialised head state on SQLite (issue 11: "the head state kept
materialised where that is cheaper"): what keeping the whole latest state in one row,
replaced in the save's own statement, must add to a save at the least, and what a
load of that row must cost at the least — no store Python on either side, only the
bytes' unavoidable work.

On a copy of ``bench_coldtail_window.py``'s file (``build <dir> 100``: agent ``k0``, a
chat of 100 ~300-character messages, its whole snapshot at 100), per operation:

- ``save``: today's lone save as the writer runs it — the TEMP view's ``INSTEAD OF``
  trigger (backends/sqlite/statements.py ``_SAVE_NEXT``: the head's compare-and-set and the event
  row, one statement, autocommit) with a 415-byte event (a stored chat append);
- ``save_head``: the same statement with one more step in the trigger, an ``UPDATE``
  of the agent's head row in a side table (agent, seq, payload, checksum),
  plus what the save must do in Python to make that row however cleverly it is built:
  the new body as one ``join`` of the previous body and the new message's bytes (a
  splice, no re-encode; the body kept at the snapshot's 32.5 KB) and the BLAKE3 of its
  link input (the snapshot's digest);
- ``load_snap``: today's cold-load statement (``_READ_STATE``: head, latest snapshot,
  events after it) of ``k0`` (k = 0), the BLAKE3 of the snapshot's link input and the
  ``ormsgpack`` parse of its body: the floor of a load at a whole snapshot;
- ``load_head``: the head row and the side row in one statement, the same hash and
  parse: the floor of a load of a materialised head (every k);
- ``sk``: ``StateStore.load`` of ``k0`` (no cache): what the store adds to ``load_snap``;
- ``lg``: the peer's ``SqliteSaver.get_tuple`` of the same chat (``lg.db``).

::

    .venv/bin/python benchmarks/bench_coldtail_window.py build /tmp/w 100
    .venv/bin/python benchmarks/bench_head_price.py cg /tmp/w            # instructions
    .venv/bin/python benchmarks/bench_head_price.py cpu /tmp/w NORMAL    # CPU, best of 7

    .venv/bin/python benchmarks/bench_head_price.py rows /tmp/w NORMAL   # row layouts

``cg`` counts each mode in its own process under callgrind (``callgrind_window.py``,
``synchronous=OFF``: the WAL frames are written, nothing is synced); ``cpu`` runs the
modes interleaved in one process (``time.thread_time``, best of 7 rounds). ``rows``:
CPU per commit of a 415-byte event row plus a 32.5 KB row kept per agent, by layout
(none; ``INSERT OR REPLACE`` into a ``WITHOUT ROWID`` table; into a rowid table; an
``UPDATE`` of a rowid table's row; a new row per commit, the older deleted), 300 commits
each, two rounds.
"""

from __future__ import annotations

import asyncio
import ctypes
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import blake3
import ormsgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open
from callgrind_window import helper, run_window
from statekeeper import StateStore

N = 200
MODES = ("save", "save_head", "load_snap", "load_head", "sk", "lg")

_VIEW = (
    "CREATE TEMP VIEW IF NOT EXISTS nr(agent_id, seq, ts, payload, checksum, tag, expected,"
    " state, digest) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
)
_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS nr_append INSTEAD OF INSERT ON nr BEGIN"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    " SELECT RAISE(ABORT, 'moved') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    " VALUES (new.agent_id, new.seq, 'patch', new.ts, new.payload, new.checksum);"
    "{head} END"
)
#: an ``UPDATE`` of a rowid table's row: the cheapest of the ways measured to replace a
#: 32 KB row (``INSERT OR REPLACE`` into a ``WITHOUT ROWID`` or a rowid table, a new
#: row per save with the old one deleted: 1.5x–3x its CPU; the ``rows`` command)
_HEAD_STEP = (
    " UPDATE sk_head_state SET seq = new.seq, payload = new.state, checksum = new.digest"
    " WHERE agent_id = new.agent_id;"
)
_READ_STATE = """
SELECT -9223372036854775808, NULL, head_seq, head_tag, NULL FROM sk_agents WHERE agent_id = ?1
UNION ALL
SELECT seq, NULL, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots
WHERE agent_id = ?1 AND seq = (SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1)
UNION ALL
SELECT seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_events
WHERE agent_id = ?1
    AND seq > coalesce((SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1), 0)
"""
_READ_HEAD = (
    "SELECT a.head_seq, a.head_tag, h.seq, CAST(h.payload AS BLOB), CAST(h.checksum AS BLOB)"
    " FROM sk_agents a LEFT JOIN sk_head_state h ON h.agent_id = a.agent_id"
    " WHERE a.agent_id = ?1"
)
_PREFIX = b"sk-link/1\x00\x00\x00\x02k0\x00\x00\x00\x08snapshot"


class Sides:
    """Every mode's state, on copies of ``out``'s files (``p.db`` left as built)."""

    def __init__(self, out: Path, sync: str) -> None:
        work = out / "head-price"
        work.mkdir(exist_ok=True)
        for name in ("save", "save_head", "load"):
            for suffix in ("", "-wal", "-shm"):
                Path(work, f"{name}.db{suffix}").unlink(missing_ok=True)
            shutil.copy(out / "p.db", work / f"{name}.db")
        self.conns: dict[str, sqlite3.Connection] = {}
        for name in ("save", "save_head", "load"):
            conn = sqlite3.connect(work / f"{name}.db", isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={sync}")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS sk_head_state (agent_id TEXT PRIMARY KEY,"
                " seq INTEGER NOT NULL, payload BLOB NOT NULL, checksum BLOB NOT NULL)"
            )
            conn.execute(_VIEW)
            conn.execute(_TRIGGER.format(head=_HEAD_STEP if name == "save_head" else ""))
            conn.execute("UPDATE sk_agents SET head_tag = NULL")
            self.conns[name] = conn
        snap = (
            self.conns["load"]
            .execute(
                "SELECT seq, payload, checksum FROM sk_snapshots"
                " WHERE agent_id = 'k0' AND seq = 100"
            )
            .fetchone()
        )
        for conn in self.conns.values():
            # the materialised head of k0: its whole snapshot's bytes, in the side row
            conn.execute("INSERT OR REPLACE INTO sk_head_state VALUES ('k0', ?, ?, ?)", snap)
        self.snapshot: bytes = snap[1]
        self.event: bytes = (
            self.conns["load"]
            .execute("SELECT payload FROM sk_events WHERE agent_id = 'k1' AND seq = 101")
            .fetchone()[0]
        )
        # a message's msgpack bytes as a splice would append them (~300 characters)
        self.item = ormsgpack.packb({"role": "user", "content": "x" * 300})
        self.seq = {"save": 100, "save_head": 100}
        self.body = {"save_head": self.snapshot}
        self.saver = lg_open(out / "lg.db", None)
        self.cfg = lg_config("k0")
        self.store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)

    def save(self, name: str) -> None:
        seq = self.seq[name] = self.seq[name] + 1
        state: bytes | None = None
        digest: bytes | None = None
        if name == "save_head":
            # (the state kept at the snapshot's size: one message in, one out)
            body = self.body[name]
            state = self.body[name] = b"".join((body[: len(body) - len(self.item)], self.item))
            digest = blake3.blake3(b"".join((_PREFIX, state))).digest()
        self.conns[name].execute(
            "INSERT INTO nr VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("k0", seq, 1.0 + seq, self.event, b"c" * 32, None, None, state, digest),
        )

    def load_snap(self) -> Any:
        rows = self.conns["load"].execute(_READ_STATE, ("k0",)).fetchall()
        rows.sort()
        payload = rows[1][3]
        blake3.blake3(b"".join((_PREFIX, payload))).digest()
        return ormsgpack.unpackb(memoryview(payload)[35:])

    def load_head(self) -> Any:
        row = self.conns["load"].execute(_READ_HEAD, ("k0",)).fetchone()
        payload = row[3]
        blake3.blake3(b"".join((_PREFIX, payload))).digest()
        return ormsgpack.unpackb(memoryview(payload)[35:])

    async def run(self, mode: str) -> None:
        if mode == "sk":
            await self.store.load("k0")
        elif mode in ("save", "save_head"):
            self.save(mode)
        elif mode == "load_snap":
            self.load_snap()
        elif mode == "load_head":
            self.load_head()
        else:
            self.saver.get_tuple(self.cfg)


async def child(out: Path, mode: str) -> None:
    window = ctypes.CDLL(str(helper(out)))
    sides = Sides(out, "OFF")
    for _ in range(5):
        await sides.run(mode)
    window.cg_start()
    for _ in range(N):
        await sides.run(mode)
    window.cg_stop()
    await sides.store.close()


async def cpu(out: Path, sync: str) -> None:
    sides = Sides(out, sync)
    best = {m: float("inf") for m in MODES}
    for _ in range(7):
        for mode in MODES:
            began = time.thread_time()
            for _ in range(N // 4):
                await sides.run(mode)
            best[mode] = min(best[mode], (time.thread_time() - began) / (N // 4))
    await sides.store.close()
    for mode in MODES:
        print(f"{mode} {best[mode] * 1e6:.1f} us")


_LAYOUTS = ("none", "without_rowid", "rowid_replace", "rowid_update", "append")


def rows(out: Path, sync: str, layout: str, n: int = 300) -> float:
    """CPU per commit (us) of ``layout`` (see the module documentation)."""
    path = out / f"rows-{layout}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    body, event = bytes(range(256)) * 127, b"e" * 415
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("CREATE TABLE ev (a TEXT, seq INTEGER, p BLOB, PRIMARY KEY (a, seq))")
    table = {
        "without_rowid": "CREATE TABLE h (a TEXT PRIMARY KEY, seq INTEGER, p BLOB) WITHOUT ROWID",
        "append": "CREATE TABLE h (a TEXT, seq INTEGER, p BLOB, PRIMARY KEY (a, seq))",
    }.get(layout, "CREATE TABLE h (a TEXT PRIMARY KEY, seq INTEGER, p BLOB)")
    conn.execute(table)
    conn.execute("INSERT INTO h VALUES ('a', 0, ?)", (body,))
    began = time.thread_time()
    for i in range(1, n + 1):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO ev VALUES ('a', ?, ?)", (i, event))
        if layout in ("without_rowid", "rowid_replace"):
            conn.execute("INSERT OR REPLACE INTO h VALUES ('a', ?, ?)", (i, body))
        elif layout == "rowid_update":
            conn.execute("UPDATE h SET seq = ?, p = ? WHERE a = 'a'", (i, body))
        elif layout == "append":
            conn.execute("INSERT INTO h VALUES ('a', ?, ?)", (i, body))
            conn.execute("DELETE FROM h WHERE a = 'a' AND seq < ?", (i,))
        conn.execute("COMMIT")
    spent = (time.thread_time() - began) / n * 1e6
    conn.close()
    return spent


def main() -> None:
    cmd, out = sys.argv[1], Path(sys.argv[2])
    if cmd == "child":
        asyncio.run(child(out, sys.argv[3]))
    elif cmd == "cpu":
        asyncio.run(cpu(out, sys.argv[3] if len(sys.argv) > 3 else "NORMAL"))
    elif cmd == "rows":
        out.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            cells = [f"{layout} {rows(out, sys.argv[3], layout):.1f} us" for layout in _LAYOUTS]
            print(", ".join(cells))
    elif cmd == "cg":
        for mode in sys.argv[3:] or MODES:
            total = run_window(__file__, ["child", str(out), mode], out, f"cg-head-{mode}")
            print(f"{mode} {total // N:,} instructions per operation")


if __name__ == "__main__":
    main()
