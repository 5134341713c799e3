"""What a *folded tail* would cost a cold load (docs/benchmarks.md, "coldk"): one row
holding every message appended since the snapshot, read, its BLAKE3 link input hashed,
parsed in one ``orjson.loads`` and appended with one ``list.extend`` — the whole of the
work past the snapshot at k = 1, 10, 50, 99 (``bench_coldload.py``'s chat). The row is
read by its own ``SELECT`` (a tail read with the snapshot would be one more row of the
same statement: a little less). CPU per load, ``time.thread_time``, best of 7 × 300::

    .venv/bin/python benchmarks/bench_tail_load.py
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

import blake3
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_cpu_us, make_messages

HEAD, END = b'{"ops":[{"op":"add","path":"/messages/-","values":[', b"]}]}"
PREFIX = b"sk-link/1\x00\x00\x00\x01a\x00\x00\x00\x04tail"


def main() -> None:
    values = [orjson.dumps(m) for m in make_messages(200, seed=7, chars=300)]
    base = [orjson.loads(v) for v in values[:100]]
    with tempfile.TemporaryDirectory(prefix="sk-tail-") as d:
        conn = sqlite3.connect(f"{d}/t.db", isolation_level=None)
        conn.execute("PRAGMA page_size=2048")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE tail (agent_id TEXT PRIMARY KEY, seq INT, payload BLOB, ck BLOB)"
        )
        query = "SELECT seq, payload, ck FROM tail WHERE agent_id = ?"
        for k in (1, 10, 50, 99):
            body = HEAD + b",".join(values[100 : 100 + k]) + END
            digest = blake3.blake3(PREFIX + body).digest()
            conn.execute(
                "INSERT OR REPLACE INTO tail VALUES ('a', ?, ?, ?)", (100 + k, body, digest)
            )

            def load() -> None:
                _, payload, checksum = conn.execute(query, ("a",)).fetchone()
                if blake3.blake3(PREFIX + payload).digest() != checksum:
                    raise SystemExit("tail does not verify")
                messages = list(base)
                messages.extend(orjson.loads(memoryview(payload)[len(HEAD) - 1 : -3]))

            print(f"k={k}: tail {len(body):,} B, {best_cpu_us(load, 300):.1f} µs", flush=True)
        conn.close()


if __name__ == "__main__":
    main()
