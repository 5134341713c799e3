"""What a save's statements cost by the pages they dirty (issue 11, helper head11).

Replays the statements of one lone save (``BEGIN IMMEDIATE``; the head's
compare-and-set ``UPDATE sk_agents``; ``INSERT INTO sk_events`` with its feed
trigger; ``COMMIT``) on schema 4's layout (``bench_save_floor.V4_DDL``), through one
reused cursor with the blobs bound as ``bytearray`` (as ``SQLiteBackend._append_row``),
and varies what the layout could change:

- ``--pages``: the file's page size (every dirtied page is one WAL frame, and SQLite
  checksums each frame's whole page at the commit);
- ``--layouts``: ``v4`` (today), ``wr`` (``sk_events`` ``WITHOUT ROWID``: one B-tree
  per event instead of the table and its primary-key index), ``nowritten`` (no
  ``sk_agents_written`` index: what keeping the by-last-write order costs a save).

Per side it reports callgrind instructions per save (every thread; the difference of
two runs, ``--small`` and ``--large`` saves after ``--pre`` saves that fill the file,
divided by their difference) and WAL frames per save (the WAL's size after
``--large`` saves with the auto-checkpoint off). ``synchronous=OFF``: no fsync.

Run::

    .venv/bin/python benchmarks/bench_save_pages.py --agents 4 --pre 2000
    .venv/bin/python benchmarks/bench_save_pages.py --agents 1000 --pre 20000 --large 250
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_save_floor import _CLAIM, _CREATE, _INSERT_EVENT, V4_DDL

TAG = 34  # bytes of a head tag
WAL_FRAME_HEADER = 24


def _ddl(layout: str) -> str:
    if layout == "wr":
        return V4_DDL.replace(
            "PRIMARY KEY (agent_id, seq));", "PRIMARY KEY (agent_id, seq)) WITHOUT ROWID;"
        )
    if layout == "nowritten":
        return V4_DDL.replace(
            "CREATE INDEX sk_agents_written ON sk_agents (updated_at, agent_id);", ""
        )
    return V4_DDL


class Saves:
    """Lone saves of ``agents`` agents in turn on a fresh file."""

    def __init__(self, path: Path, layout: str, page: int, agents: int, payload: int) -> None:
        self.path = path
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"PRAGMA page_size = {page}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(_ddl(layout))
        conn.execute("PRAGMA synchronous = OFF")
        self.conn = conn
        self.cur = conn.cursor()
        self.agents = agents
        self.payload = bytearray(os.urandom(payload))
        self.seqs = [0] * agents
        self.tags = [bytearray(os.urandom(TAG)) for _ in range(agents)]
        self.n = 0

    def save(self) -> None:
        agent = self.n % self.agents
        self.n += 1
        aid, seq, ts = f"agent-{agent:07d}", self.seqs[agent] + 1, time.time()
        tag, old, cur = bytearray(os.urandom(TAG)), self.tags[agent], self.cur
        cur.execute("BEGIN IMMEDIATE")
        if seq == 1:
            claimed = cur.execute(_CREATE, (aid, seq, ts, ts, tag)).rowcount
        else:
            claimed = cur.execute(_CLAIM, (seq, ts, tag, aid, seq - 1, old)).rowcount
        assert claimed == 1
        checksum = bytearray(os.urandom(32))
        cur.execute(_INSERT_EVENT, (aid, seq, "patch", ts, self.payload, checksum))
        cur.execute("COMMIT")
        self.seqs[agent], self.tags[agent] = seq, tag

    def fill(self, pre: int) -> None:
        """``pre`` saves, then every agent has a head; the WAL checkpointed and emptied."""
        for _ in range(max(pre, self.agents)):
            self.save()
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def frames(self, saves: int, page: int) -> float:
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        for _ in range(saves):
            self.save()
        return os.path.getsize(f"{self.path}-wal") / (page + WAL_FRAME_HEADER) / saves


def child(args: argparse.Namespace, layout: str, page: int, saves: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s = Saves(Path(tmp) / "x.db", layout, page, args.agents, args.payload)
        s.fill(args.pre)
        for _ in range(saves):
            s.save()
        s.conn.close()


def instructions(args: argparse.Namespace, layout: str, page: int, saves: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        cmd = [sys.executable, __file__, "--child", layout, str(page), str(saves)]
        cmd += ["--agents", str(args.agents), "--pre", str(args.pre)]
        cmd += ["--payload", str(args.payload)]
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        return sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", out.read_text(), re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=3, metavar=("LAYOUT", "PAGE", "SAVES"))
    parser.add_argument("--layouts", nargs="+", default=["v4", "wr", "nowritten"])
    parser.add_argument("--pages", nargs="+", type=int, default=[4096, 2048, 1024])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--pre", type=int, default=2000)
    parser.add_argument("--payload", type=int, default=420)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=450)
    args = parser.parse_args()
    if args.child:
        layout, page, saves = args.child
        child(args, layout, int(page), int(saves))
        return
    print(f"agents {args.agents}, {args.pre} saves before, payload {args.payload} B")
    print("| layout | page | instructions per save | WAL frames per save |")
    print("|---|---|---|---|")
    for layout in args.layouts:
        for page in args.pages:
            small = instructions(args, layout, page, args.small)
            large = instructions(args, layout, page, args.large)
            with tempfile.TemporaryDirectory() as tmp:
                s = Saves(Path(tmp) / "x.db", layout, page, args.agents, args.payload)
                s.fill(args.pre)
                frames = s.frames(args.large, page)
                s.conn.close()
            per = (large - small) / (args.large - args.small)
            print(f"| {layout} | {page} | {per:,.0f} | {frames:.2f} |", flush=True)


if __name__ == "__main__":
    main()
