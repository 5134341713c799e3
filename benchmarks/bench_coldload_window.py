"""Instructions of one cold load of the latest state (callgrind, counted only around
the loads), statekeeper against ``SqliteSaver.get_tuple``, wherever the head sits.

``bench_coldload_callgrind.py`` counts whole processes and subtracts two of them;
here the process opens a window (``callgrind_window.py``'s helper) right before N
loads and closes it right after, so the count is the loads' own. The chat is
``bench_coldload.py``'s (~300-character messages, one added per save), saved with
``snapshot_every=100``: agent ``k<K>`` has its head K events past its snapshot (100 + K
saves); the peer's thread ``k<K>`` holds the same documents, one checkpoint per save.

Modes: ``sk<K>`` (``StateStore(cache_size=0).load``), ``lg<K>`` (``get_tuple``),
``floor`` (one ``SELECT`` of the snapshot row, its checksum, the parse of its body:
msgpack for a snapshot made of a save's packed bytes, as here, by the fastest parser
installed) and
the k=0 load's parts: ``rows`` (the backend's one statement), ``decode`` (the codec's
verify + parse of the snapshot row), ``thin`` (the read path's
``ReadPath.current`` with the statement's rows given, i.e. the Python around it
without the statement)::

    .venv/bin/python benchmarks/bench_coldload_window.py build /tmp/cg-cold
    .venv/bin/python benchmarks/bench_coldload_window.py run sk0 /tmp/cg-cold
    .venv/bin/python benchmarks/bench_coldload_window.py all /tmp/cg-cold   # the table

``PYTHONPATH=<another tree's src>`` measures another tree on the same files (built by
either: the record format is the same).
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import sqlite3
import sys
from pathlib import Path

import blake3
import msgpack  # type: ignore[import-untyped]
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_loads_in_window, lg_open, lg_plan, make_messages
from callgrind_window import helper, run_window
from statekeeper import StateStore
from statekeeper.codec.formats import fast_unpackb

#: the floor's msgpack parser: the fastest installed (as ``bench_coldload.py``'s floor)
UNPACKB = fast_unpackb() or msgpack.unpackb

HEADS = (0, 1, 50, 99)
MODES = (
    *(f"sk{k}" for k in HEADS),
    *(f"lg{k}" for k in HEADS),
    "floor",
    "rows",
    "decode",
    "thin",
)
#: loads counted per mode (per load = the window's total / N)
N = 200


async def build(out: Path) -> None:
    """The statekeeper file (``p.db``) and the peer's (``lg.db``), in ``out`` (made)."""
    msgs = make_messages(200, seed=7, chars=300)
    async with StateStore(
        f"sqlite:///{out}/p.db?synchronous=OFF", snapshot_every=100, witness=False
    ) as store:
        for k in HEADS:
            for i in range(100 + k):
                await store.save(f"k{k}", {"messages": msgs[: i + 1]})
    saver = lg_open(out / "lg.db", "OFF")
    for k in HEADS:
        cfg = lg_config(f"k{k}")
        docs = [{"messages": msgs[: i + 1]} for i in range(100 + k)]
        for cp, meta, versions in lg_plan(saver, docs):
            cfg = saver.put(cfg, cp, meta, versions)
    saver.conn.close()


async def measure(mode: str, out: Path, n: int) -> None:
    """``n`` operations of ``mode`` inside the window (after a few outside it)."""
    window = ctypes.CDLL(str(helper(out)))
    if mode.startswith("lg"):
        lg_loads_in_window(out / "lg.db", f"k{mode[2:]}", n, window)
        return
    if mode == "floor":
        conn = sqlite3.connect(out / "p.db")
        sql = "SELECT payload FROM sk_snapshots WHERE agent_id = ? ORDER BY seq DESC LIMIT 1"

        def floor() -> None:
            row = conn.execute(sql, ("k0",)).fetchone()
            (blake3.blake3 if row[0][1] & 0x40 else hashlib.sha256)(row[0]).digest()
            if row[0][1] & 3 == 1:  # msgpack: a save's packed bytes
                UNPACKB(row[0][35:])
            else:
                orjson.loads(row[0][35:])

        for _ in range(5):
            floor()
        window.cg_start()
        for _ in range(n):
            floor()
        window.cg_stop()
        return
    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    agent = f"k{mode[2:]}" if mode.startswith("sk") else "k0"
    for _ in range(5):
        await store.load(agent)
    reads = store._reads
    backend = reads.backend
    if mode == "rows":
        window.cg_start()
        for _ in range(n):
            await backend.read_state_rows(agent)
        window.cg_stop()
    elif mode == "decode":
        _, _, snap, _ = await backend.read_state_rows(agent)
        assert snap is not None
        codec = reads.codec
        window.cg_start()
        for _ in range(n):
            codec.decode_typed(
                agent, snap.seq, "snapshot", snap.timestamp, snap.payload, snap.checksum
            )
        window.cg_stop()
    elif mode == "thin":
        read = await backend.read_state_rows(agent)

        async def given(agent_id: str) -> object:
            return read[0], read[1], read[2], list(read[3])

        backend.read_state_rows = given  # type: ignore[method-assign,assignment]
        window.cg_start()
        for _ in range(n):
            reads.public(await reads.current(agent))  # type: ignore[arg-type]
        window.cg_stop()
    else:
        window.cg_start()
        for _ in range(n):
            await store.load(agent)
        window.cg_stop()
    await store.close()


def main() -> None:
    what = sys.argv[1]
    if what == "run":  # run MODE DIR
        mode, out = sys.argv[2], Path(sys.argv[3])
        total = run_window(__file__, ["child", str(out), mode, str(N)], out, f"cg-{mode}")
        print(f"{mode}: {total // N:,} instructions per operation")
        return
    out = Path(sys.argv[2])
    if what == "build":
        out.mkdir(parents=True, exist_ok=True)
        asyncio.run(build(out))
    elif what == "child":
        asyncio.run(measure(sys.argv[3], out, int(sys.argv[4])))
    elif what == "all":
        rows = {
            m: run_window(__file__, ["child", str(out), m, str(N)], out, f"cg-{m}") // N
            for m in MODES
        }
        print("| mode | instructions per operation | / lg of the same head |")
        print("|---|---|---|")
        for m, count in rows.items():
            peer = rows.get(f"lg{m[2:]}" if m.startswith("sk") else "lg0")
            ratio = f"{count / peer:.2f}x" if peer else ""
            print(f"| {m} | {count:,} | {ratio} |")
    else:
        raise SystemExit(f"unknown command {what!r}: build, run MODE, child, all")


if __name__ == "__main__":
    main()
