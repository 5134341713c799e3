"""Instructions of one cold load (``bench_coldload.py``'s workload), for callgrind.

Builds a chat of ~300-character messages (100 saves: the head at a snapshot, mode
``sk0``; 108 saves: 8 events past it, mode ``sk``), then makes N cold loads
(``cache_size=0``); ``sk<k>`` / ``lg<k>`` with k events past the snapshot (``sk99``: 199 saves);
``floor`` makes N of the verified-load floor (one ``SELECT`` of the
snapshot row, its checksum (SHA-256, or BLAKE3 as its header says), the parse of its
body: a packed snapshot's msgpack by the fastest parser installed,
``statekeeper.codec.formats.fast_unpackb`` (``ormsgpack``) or ``msgpack.unpackb``, else
``orjson.loads``); ``lg`` N ``SqliteSaver.get_tuple`` of the
same chat. Instructions per load = the difference of two runs (N=250 and N=50) / 200::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python benchmarks/bench_coldload_callgrind.py sk 250

(valgrind hides the CPU's SHA extensions and some SIMD paths: compare statekeeper's
modes with each other, not with the peer.) A third argument, a directory, keeps the built
file there and reuses it in later runs of the same mode (the build is most of a run's
instructions under valgrind: the pair of runs then takes minutes less)::

    valgrind --tool=callgrind .venv/bin/python benchmarks/bench_coldload_callgrind.py \
        sk0 250 /tmp/cg-sk0
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import sys
import tempfile
from pathlib import Path

import blake3
import msgpack  # type: ignore[import-untyped]
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages
from statekeeper import StateStore
from statekeeper.codec.formats import fast_unpackb

unpackb = fast_unpackb() or msgpack.unpackb


def kept(d: str) -> tuple[bool, bool]:
    """Whether ``d`` holds a statekeeper file built already, and a SqliteSaver file."""
    Path(d).mkdir(parents=True, exist_ok=True)
    return Path(d, "built").exists(), Path(d, "lg.db").exists()


async def main(mode: str, n: int, keep: str | None = None) -> None:
    d = keep or tempfile.mkdtemp(prefix="sk-cg-")
    built, has_lg = kept(d)
    url = f"sqlite:///{d}/p.db?synchronous=OFF"
    msgs = make_messages(200, seed=7, chars=300)
    # sk<k> / lg<k>: k events past the snapshot at 100 (sk: 8, sk0 and lg: 0)
    kind, past = mode[:2], {"sk": "8", "lg": "0"}.get(mode, mode[2:]) or "0"
    saves = 100 + int(past) if kind in ("sk", "lg") else 108
    if not built:
        async with StateStore(url, snapshot_every=100, witness=False) as s:
            for i in range(saves):
                await s.save("a", {"messages": msgs[: i + 1]})
        if keep:
            Path(d, "built").touch()  # noqa: ASYNC240 (before the measured loads)
    store = StateStore(f"sqlite:///{d}/p.db", cache_size=0, witness=False)
    conn = sqlite3.connect(f"{d}/p.db")
    await store.load("a")
    if kind == "sk":
        for _ in range(n):
            await store.load("a")
    elif mode == "floor":
        sql = "SELECT payload FROM sk_snapshots WHERE agent_id = ? ORDER BY seq DESC LIMIT 1"
        for _ in range(n):
            row = conn.execute(sql, ("a",)).fetchone()
            (blake3.blake3 if row[0][1] & 0x40 else hashlib.sha256)(row[0]).digest()
            if row[0][1] & 3 == 1:  # msgpack: a save's packed bytes (bench_coldload's floor)
                unpackb(row[0][35:])
            else:
                orjson.loads(row[0][35:])
    elif kind == "lg":
        fresh = not has_lg
        saver = lg_open(f"{d}/lg.db", "OFF")
        cfg = lg_config("a")
        docs = [{"messages": msgs[: i + 1]} for i in range(saves)] if fresh else []
        for cp, meta, v in lg_plan(saver, docs):
            cfg = saver.put(cfg, cp, meta, v)
        saver.get_tuple(lg_config("a"))
        for _ in range(n):
            saver.get_tuple(lg_config("a"))
    await store.close()
    conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
