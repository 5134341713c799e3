"""Instructions of one cold load (``bench_coldload.py``'s workload), for callgrind.

Builds a chat of ~300-character messages (100 saves: the head at a snapshot, mode
``sk0``; 108 saves: 8 events past it, mode ``sk``), then makes N cold loads
(``cache_size=0``); ``sk<k>`` / ``lg<k>`` with k events past the snapshot (``sk99``: 199 saves);
``floor`` makes N of the verified-load floor (one ``SELECT`` of the
snapshot row, its checksum (SHA-256, or BLAKE3 as its header says), the parse of its
body: a packed snapshot's msgpack by the fastest parser installed,
``statekeeper.codec.formats.fast_unpackb`` (``ormsgpack``) or ``msgpack.unpackb``, else
``orjson.loads``); ``lg`` N ``SqliteSaver.get_tuple`` of the
same chat (``SK_SNAPSHOT_EVERY=bounded`` in the environment of the build: the store's
default policy instead of ``snapshot_every=100``). Instructions per load = the
difference of two runs (N=250 and N=50) / 200::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python benchmarks/bench_coldload_callgrind.py sk 250

(valgrind hides the CPU's SHA extensions and some SIMD paths: compare statekeeper's
modes with each other, not with the peer.) A third argument, a directory, keeps the built
files there and reuses them in later runs of the same mode. A run that finds the
directory not built yet only builds it and measures nothing (run it once before the
pair): the build must never be inside one run of the pair only::

    .venv/bin/python benchmarks/bench_coldload_callgrind.py sk0 0 /tmp/cg-sk0   # builds
    for n in 50 250; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-$n.out \\
        .venv/bin/python benchmarks/bench_coldload_callgrind.py sk0 $n /tmp/cg-sk0; done
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import blake3
import msgpack  # type: ignore[import-untyped]
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages
from statekeeper import StateStore
from statekeeper.codec.formats import fast_unpackb

unpackb = fast_unpackb() or msgpack.unpackb


def kept(d: str) -> tuple[int | None, bool]:
    """The saves the statekeeper file kept in ``d`` was built with (None: not built),
    and whether ``d`` holds a SqliteSaver file."""
    Path(d).mkdir(parents=True, exist_ok=True)
    marker = Path(d, "built")
    text = marker.read_text().strip() if marker.exists() else ""
    saves = int(text) if text.isdigit() else None  # (an empty marker: an older script's)
    return saves, Path(d, "lg.db").exists()


async def build(d: str, saves: int, msgs: list[Any], lg: bool) -> None:
    """The statekeeper file of ``saves`` saves in ``d`` (and with ``lg`` the
    SqliteSaver file of the same chat)."""
    url = f"sqlite:///{d}/p.db?synchronous=OFF"
    every: Any = os.environ.get("SK_SNAPSHOT_EVERY", "100")  # ("bounded": the default)
    every = int(every) if every.isdigit() else every
    async with StateStore(url, snapshot_every=every, witness=False) as s:
        for i in range(saves):
            await s.save("a", {"messages": msgs[: i + 1]})
    if lg:
        saver = lg_open(f"{d}/lg.db", "OFF")
        cfg = lg_config("a")
        for cp, meta, v in lg_plan(saver, [{"messages": msgs[: i + 1]} for i in range(saves)]):
            cfg = saver.put(cfg, cp, meta, v)
        saver.conn.close()


async def main(mode: str, n: int, keep: str | None = None) -> None:
    d = keep or tempfile.mkdtemp(prefix="sk-cg-")
    msgs = make_messages(200, seed=7, chars=300)
    # sk<k> / lg<k>: k events past the snapshot at 100 (sk: 8, sk0 and lg: 0)
    kind, past = mode[:2], {"sk": "8", "lg": "0"}.get(mode, mode[2:]) or "0"
    saves = 100 + int(past) if kind in ("sk", "lg") else 108
    if keep is None:  # (each run of the pair builds the same files: the build cancels)
        await build(d, saves, msgs, kind == "lg")
    else:
        built, has_lg = kept(d)
        if built is None or (kind == "lg" and not has_lg):
            # A run that builds measures nothing. It used to build and then measure:
            # the build (27.5 M instructions for sk0) was then inside one run of the
            # pair only, and the difference counted it once: a fresh directory run
            # N=50 first under-counted a load by build / 200 (sk0: 368k for a load of
            # 505k, callgrind; coldread's "379,438" was this), N=250 first over-counted.
            for stale in Path(d).glob("*.db*"):  # noqa: ASYNC240 (before any measure)
                stale.unlink()
            await build(d, saves, msgs, kind == "lg")
            Path(d, "built").write_text(str(saves))  # noqa: ASYNC240
            print(f"built {d} ({saves} saves): now run the pair", file=sys.stderr)
            return
        if built != saves:
            raise SystemExit(f"{d} was built with {built} saves, mode {mode} needs {saves}")
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
            # the body parsed from a view, as a load parses it (``Codec.decode_view``):
            # ``row[0][35:]`` copied it, 32.6k instructions a load does not spend
            body = memoryview(row[0])[35:]
            if row[0][1] & 3 == 1:  # msgpack: a save's packed bytes (bench_coldload's floor)
                unpackb(body)
            else:
                orjson.loads(body)
    elif kind == "lg":
        saver = lg_open(f"{d}/lg.db", "OFF")
        saver.get_tuple(lg_config("a"))
        for _ in range(n):
            saver.get_tuple(lg_config("a"))
    await store.close()
    conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
