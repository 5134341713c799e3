"""Stored bytes per save (events and snapshots) of one chat, by snapshot policy: the
default (``"bounded"``) against ``snapshot_every=100``, for chats of 10 -> 30 and
10 -> 60 messages (``bench_hotpath.py``'s quick and full workloads) and of 1 -> 240
and 1 -> 1,000 messages (~300-character messages, one appended per save; SQLite,
``synchronous=OFF``; the stored payloads' bytes).

Run::

    .venv/bin/python benchmarks/bench_snapshot_bytes.py
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from statekeeper import StateStore


async def run(policy: Any, first: int, last: int, d: str) -> None:
    msgs = make_messages(last, seed=7, chars=300)
    opts = {} if policy == "default" else {"snapshot_every": policy}
    path = f"{d}/{policy}-{first}-{last}.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", witness=False, **opts) as st:
        for i in range(first, last + 1):
            await st.save("a", {"messages": msgs[:i]})
    with closing(sqlite3.connect(path)) as con:
        ev = con.execute("SELECT sum(length(payload)) FROM sk_events").fetchone()[0]
        sn, sb = con.execute(
            "SELECT count(*), coalesce(sum(length(payload)), 0) FROM sk_snapshots"
        ).fetchone()
    n = last - first + 1
    print(
        f"{policy:>8} saves {first}->{last} msgs: events {ev / n:,.0f} B/save, "
        f"{sn} snapshots {sb / n:,.0f} B/save, total {(ev + sb) / n:,.0f} B/save"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        for first, last in ((10, 30), (10, 60), (1, 240), (1, 1000)):
            for policy in ("default", 100):
                await run(policy, first, last, d)


if __name__ == "__main__":
    asyncio.run(main())
