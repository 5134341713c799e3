"""The CPU a restore's refusal of rows outside an image's streams adds (docs/benchmarks.md
"imagerows", "idemrows"): an image of 100,000 streams, 300,000 events, 100,000 snapshots
and 200,000 idempotency records made by SQL (the checks' cost depends on the rows, not
their contents), then the best of 5 ``process_time`` of each statement the general
checking pass runs (:func:`statekeeper.governance.backup.filecopy.refuse_strays`) and of
the merged scan's probe of the idempotency records
(:func:`statekeeper.backends.sqlite.importing.stray_key`).

    PYTHONPATH=src python benchmarks/bench_restore_strays.py [image.db]
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.sqlite.importing import stray_key, stray_row

STREAMS = 100_000


async def _schema(db: str) -> None:
    async with StateStore(f"sqlite:///{db}") as store:
        await store.save("x", {"a": 1})


def make(db: str) -> None:
    asyncio.run(_schema(db))
    conn = sqlite3.connect(db)
    for table in ("sk_events", "sk_snapshots", "sk_agents", "sk_idempotency", "sk_feed"):
        conn.execute(f"DELETE FROM {table}")
    conn.execute("DROP TRIGGER IF EXISTS sk_feed_append")
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
        " SELECT printf('t%d/a%06d', i % 7, i), 3, 0, 0, randomblob(40) FROM n",
        (STREAMS - 1,),
    )
    conn.execute(
        "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
        " SELECT a.agent_id, s.seq, 'k', 0, randomblob(600), randomblob(32) FROM sk_agents a,"
        " (SELECT 1 AS seq UNION ALL SELECT 2 UNION ALL SELECT 3) s"
    )
    conn.execute(
        "INSERT INTO sk_snapshots(agent_id, seq, ts, payload, checksum)"
        " SELECT agent_id, 2, 0, randomblob(600), randomblob(32) FROM sk_agents"
    )
    conn.execute(
        "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq)"
        " SELECT a.agent_id, 'hmac:k1:' || hex(randomblob(32)), s.seq, s.seq FROM sk_agents a,"
        " (SELECT 1 AS seq UNION ALL SELECT 3) s"
    )
    conn.commit()
    conn.execute("VACUUM")
    conn.close()


def best(run: Callable[[], Any], times: int = 5) -> float:
    seconds = []
    for _ in range(times):
        started = time.process_time()
        run()
        seconds.append(time.process_time() - started)
    return min(seconds)


def main() -> None:
    db = sys.argv[1] if len(sys.argv) > 1 else "bench-strays.db"
    if not os.path.exists(db):
        make(db)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.execute(f"PRAGMA mmap_size = {os.path.getsize(db)}")
    count = best(lambda: conn.execute("SELECT count(*) FROM sk_events").fetchone())
    snaps = best(lambda: stray_row(conn, "sk_snapshots"))
    events = best(lambda: stray_row(conn, "sk_events"))
    keys = best(lambda: stray_key(conn))
    print(f"count(*) of the events:            {count:.4f} CPU-s")
    print(f"snapshots outside the streams:     {snaps:.4f} CPU-s")
    print(f"events outside (when counts differ): {events:.4f} CPU-s")
    print(f"idempotency records outside:       {keys:.4f} CPU-s")
    conn.close()


if __name__ == "__main__":
    main()
