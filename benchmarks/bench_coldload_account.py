"""Where a cold load's microseconds go, part by part, against ``SqliteSaver.get_tuple``'s
(issue 11: a cold load <= ``get_tuple`` wherever the head sits; 1k -> 1M agents <= the
peer), CPU per call in a tight loop (``time.thread_time``, best of 9 rounds), each part
timed alone on the same rows (docs/benchmarks.md, "coldload").

``chat``: the chat of ``bench_coldload_layouts.py`` (``--build`` makes its files, or
``--dir`` reuses them), the head k = 0/1/8/50/99 events past the whole snapshot at 100:

* ``sk``: ``StateStore(url, cache_size=0).load``; its parts: ``stmt`` (the store's one
  statement: head, latest snapshot, events after it), ``stmt2`` (a tail snapshot's
  second statement: its whole snapshot and base), ``hash`` (each snapshot row's link
  hash, the algorithm its header names), ``parse`` (each snapshot body's parse),
  ``events`` (the events past the snapshot verified and parsed,
  ``Codec.decode_appends``), and ``python`` (what is left: the store's own code);
* ``lg``: ``get_tuple``; its parts: ``stmt1`` (the checkpoint row), ``stmt2`` (its
  writes), ``parse`` (``serde.loads_typed``), ``meta`` (the metadata's JSON) and
  ``python`` (what is left).

``--sync``: process CPU a load through ``SyncStateStore`` (its portal) and the async
load on the caller's thread.

``many``: a store and a peer file of ``bench_scaling.py --peer`` (3-event streams, no
snapshot): CPU a load of ``sk`` (default cache, as ``bench_scaling.py``) and ``sk0``
(``cache_size=0``) against ``get_tuple`` and a one-row read; the store's parts (``stmt``,
``verify+parse``: ``Codec.decode_chain`` of the three events, ``fold``: those applied to
a record); and the read system calls a load makes (``/proc/self/io``: pages SQLite read
from the file, agents drawn at random).

Run::

    .venv/bin/python benchmarks/bench_coldload_account.py --build /tmp/acct
    .venv/bin/python benchmarks/bench_coldload_account.py --dir /tmp/acct
    .venv/bin/python benchmarks/bench_coldload_account.py \
        --many .bench/agents-1000000.db .bench/lg-agents-1000000.db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_cpu_us, lg_config, lg_open
from bench_coldload_layouts import KS, build
from bench_hotpath import loadavg
from statekeeper.backends.sqlite.reads import _READ_SNAPSHOTS_AT, _READ_STATE
from statekeeper.codec import ZERO_LINK
from statekeeper.codec import pipeline as codec_pipeline
from statekeeper.codec.formats import fast_unpackb
from statekeeper.store.state import AgentRecord, apply_payloads
from statekeeper.store.store import StateStore
from statekeeper.store.sync import SyncStateStore

#: the peer's two statements, as ``SqliteSaver.get_tuple`` runs them (latest checkpoint)
_LG_ROW = (
    "SELECT thread_id, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
    " FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?"
    " ORDER BY checkpoint_id DESC LIMIT 1"
)
_LG_WRITES = (
    "SELECT task_id, channel, type, value FROM writes"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx"
)


def _sync_load(store: StateStore) -> Callable[[str], Any]:
    """``store.load`` as a plain call (a SQLite cold load never suspends)."""

    def load(agent: str) -> Any:
        coro = store.load(agent)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError("the load suspended: not an inline read")

    return load


def _rows(conn: sqlite3.Connection, agent: str) -> list[Any]:
    rows = conn.execute(_READ_STATE, (agent,)).fetchall()
    rows.sort()
    return rows


def _link_input(agent: str, record_type: str, seq: int, ts: float) -> bytes:
    names = codec_pipeline._names(agent, record_type)
    return b"".join((b"sk-link/1", names, codec_pipeline._seq_ts.pack(seq, ts)))


def _hash(agent: str, seq: int, ts: float, payload: bytes) -> Callable[[], Any]:
    hasher = codec_pipeline._PLAIN_ANY[payload[:3]]
    return lambda: codec_pipeline._plain_link(hasher, agent, "snapshot", seq, ts, payload)


async def chat(out: Path, n: int) -> dict[str, Any]:
    """Per agent k: the parts of a store load and of a ``get_tuple``, CPU us a call."""
    chains = json.loads((out / "chains.json").read_text())
    conn = sqlite3.connect(f"file:{out / 'chain.db'}?mode=ro", uri=True)
    store = StateStore(f"sqlite:///{out / 'chain.db'}?synchronous=FULL", cache_size=0)
    saver = lg_open(out / "lg.db", "FULL")
    load = _sync_load(store)
    unpackb: Any = fast_unpackb()
    codec = store.codec
    res: dict[str, Any] = {}
    try:
        await store.load("k0")  # (the store's first read: its gate, on the loop)
        for k in KS:
            agent = f"k{k}"
            chain = chains[agent]
            rows = _rows(conn, agent)
            snap, events = rows[1], rows[2:]
            seq, ts, payload = snap[0], snap[2], snap[3]
            sk: dict[str, float] = {"total": best_cpu_us(lambda: load(agent), n, 9)}  # noqa: B023
            sk["stmt"] = best_cpu_us(lambda: _rows(conn, agent), n, 9)  # noqa: B023
            snaps = [(seq, ts, payload)]
            if chain["w"]:
                lo, hi = sorted((chain["w"], chain["base"] or chain["w"]))
                args = (agent, lo, hi)
                sk["stmt2"] = best_cpu_us(
                    lambda: conn.execute(_READ_SNAPSHOTS_AT, args).fetchall(),  # noqa: B023
                    n,
                    9,
                )
                snaps += [(r[0], r[1], r[2]) for r in conn.execute(_READ_SNAPSHOTS_AT, args)]
            sk["hash"] = sum(best_cpu_us(_hash(agent, *s), n, 9) for s in snaps)
            sk["parse"] = sum(
                best_cpu_us(lambda p=s[2]: unpackb(memoryview(p)[35:]), n, 9) for s in snaps
            )
            if events:
                prev = payload[3:35]
                sk["events"] = best_cpu_us(
                    lambda: codec.decode_appends(agent, events, prev),  # noqa: B023
                    n,
                    9,
                )
            sk["python"] = sk["total"] - sum(v for p, v in sk.items() if p != "total")
            cfg = lg_config(agent)
            row = saver.conn.execute(_LG_ROW, (agent, "")).fetchone()
            lg: dict[str, float] = {
                "total": best_cpu_us(lambda: saver.get_tuple(cfg), n, 9),  # noqa: B023
                "stmt1": best_cpu_us(
                    lambda: saver.conn.execute(_LG_ROW, (agent, "")).fetchone(),  # noqa: B023
                    n,
                    9,
                ),
                "stmt2": best_cpu_us(
                    lambda: saver.conn.execute(_LG_WRITES, (agent, "", row[1])).fetchall(),  # noqa: B023
                    n,
                    9,
                ),
                "parse": best_cpu_us(lambda: saver.serde.loads_typed((row[3], row[4])), n, 9),  # noqa: B023
                "meta": best_cpu_us(lambda: json.loads(row[5]), n, 9),  # noqa: B023
            }
            lg["python"] = lg["total"] - sum(v for p, v in lg.items() if p != "total")
            res[agent] = {"sk": sk, "lg": lg, "ratio": sk["total"] / lg["total"]}
    finally:
        await store.close()
        saver.conn.close()
        conn.close()
    return res


def _process_us(fn: Callable[[], Any], n: int) -> float:
    """:func:`best_cpu_us` by the process's CPU (every thread's: the portal's too)."""
    out = 1e9
    for _ in range(9):
        t = time.process_time()
        for _ in range(n):
            fn()
        out = min(out, (time.process_time() - t) / n * 1e6)
    return out


def sync_face(out: Path, n: int) -> dict[str, dict[str, float]]:
    """Process CPU us a load through ``SyncStateStore`` (its portal: the call handed to
    the store's loop thread and back) and the async load driven on this thread."""
    url = f"sqlite:///{out / 'chain.db'}?synchronous=FULL"
    res: dict[str, dict[str, float]] = {}
    face = SyncStateStore(url, cache_size=0)
    try:
        for k in KS:
            face.load(f"k{k}")
            res[f"k{k}"] = {"sync": _process_us(lambda: face.load(f"k{k}"), n)}  # noqa: B023
    finally:
        face.close()

    async def driven() -> None:
        store = StateStore(url, cache_size=0)
        load = _sync_load(store)
        await store.load("k0")
        for k in KS:
            res[f"k{k}"]["async"] = _process_us(lambda: load(f"k{k}"), n)  # noqa: B023
        await store.close()

    asyncio.run(driven())
    return res


def _syscr() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("syscr"):
                return int(line.split()[1])
    return 0


async def many(sk_path: Path, lg_path: Path, n: int) -> dict[str, Any]:
    """The 3-event streams of ``bench_scaling.py --peer``: CPU us a load and its parts,
    and read system calls a load over agents drawn at random."""
    conn = sqlite3.connect(f"file:{sk_path}?mode=ro", uri=True)
    count = conn.execute("SELECT count(*) FROM sk_agents").fetchone()[0]
    rng = random.Random(5)
    hot = [f"agent-{i:07d}" for i in range(0, min(count, 1000), 7)]
    cached = StateStore(f"sqlite:///{sk_path}")
    bare = StateStore(f"sqlite:///{sk_path}", cache_size=0)
    saver = lg_open(lg_path, "FULL")
    loads = {"sk": _sync_load(cached), "sk0": _sync_load(bare)}
    codec = bare.codec
    rows = {a: _rows(conn, a)[1:] for a in hot}
    await cached.load(hot[0])  # (each store's first read: its gate, on the loop)
    await bare.load(hot[0])

    def each(fn: Callable[[str], Any]) -> Callable[[], None]:
        def run() -> None:
            for a in hot:
                fn(a)

        return run

    def sk_cached(a: str) -> None:
        loads["sk"](a)
        cached._reads.cache.discard(a)  # (every load cold, as a sampled agent's)

    def verify(a: str) -> Any:
        return codec.decode_chain(a, rows[a], ZERO_LINK, appends=True)

    def fold(a: str) -> Any:
        record = AgentRecord(a, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
        apply_payloads(record, rows[a], verify(a)[0])
        return record

    def one_row(a: str) -> Any:
        return conn.execute(
            "SELECT payload, checksum FROM sk_events WHERE agent_id = ? AND seq = 3", (a,)
        ).fetchall()

    per = len(hot)
    cpu = {
        "sk (cache)": best_cpu_us(each(sk_cached), 3, 9) / per,
        "sk0 (cache_size=0)": best_cpu_us(each(loads["sk0"]), 3, 9) / per,
        "get_tuple": best_cpu_us(each(lambda a: saver.get_tuple(lg_config(a))), 3, 9) / per,
        "one-row read": best_cpu_us(each(one_row), 3, 9) / per,
        "stmt": best_cpu_us(each(lambda a: _rows(conn, a)), 3, 9) / per,
        "verify+parse": best_cpu_us(each(verify), 3, 9) / per,
        "verify+parse+fold": best_cpu_us(each(fold), 3, 9) / per,
    }
    reads: dict[str, list[float]] = {"sk0": [], "get_tuple": []}
    for r in range(4):
        ids = [f"agent-{rng.randrange(count):07d}" for _ in range(n)]
        for side in ("sk0", "get_tuple") if r % 2 else ("get_tuple", "sk0"):
            before = _syscr()
            for a in ids:
                if side == "sk0":
                    loads["sk0"](a)
                else:
                    saver.get_tuple(lg_config(a))
            reads[side].append((_syscr() - before) / n)
    await cached.close()
    await bare.close()
    saver.conn.close()
    conn.close()
    return {"agents": count, "cpu_us": cpu, "read_syscalls_a_load": reads}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, help="make the chat files in this directory")
    parser.add_argument("--dir", type=Path, help="account the chat files --build made here")
    parser.add_argument(
        "--sync", action="store_true", help="with --dir: the sync face's load (its portal)"
    )
    parser.add_argument("--many", nargs=2, type=Path, metavar=("SK_DB", "LG_DB"))
    parser.add_argument("--calls", type=int, default=2000, help="calls a round (chat)")
    parser.add_argument("--loads", type=int, default=2000, help="random loads a round (many)")
    args = parser.parse_args(argv)
    print(f"load average at start: {loadavg()}")
    out: dict[str, Any] = {}
    if args.build is not None:
        args.build.mkdir(parents=True, exist_ok=True)
        chains = asyncio.run(build(args.build))
        (args.build / "chains.json").write_text(json.dumps(chains))
        args.dir = args.dir or args.build
    if args.dir is not None:
        out["chat"] = got = asyncio.run(chat(args.dir, args.calls))
        for agent, row in got.items():
            sk = " ".join(f"{p} {v:.1f}" for p, v in row["sk"].items())
            lg = " ".join(f"{p} {v:.1f}" for p, v in row["lg"].items())
            print(f"{agent}: sk {sk} | lg {lg} | {row['ratio']:.2f}x")
    if args.dir is not None and args.sync:
        out["sync"] = faces = sync_face(args.dir, args.calls)
        for agent, row in faces.items():
            print(f"{agent}: SyncStateStore.load {row['sync']:.1f} us, async {row['async']:.1f} us")
    if args.many is not None:
        out["many"] = got = asyncio.run(many(args.many[0], args.many[1], args.loads))
        print(f"{got['agents']:,} agents, CPU us a load:")
        print("  " + ", ".join(f"{p} {v:.1f}" for p, v in got["cpu_us"].items()))
        reads = got["read_syscalls_a_load"]
        print("  read syscalls a load: " + ", ".join(f"{s} {v}" for s, v in reads.items()))
    out["load_average_at_end"] = loadavg()
    print(orjson.dumps(out).decode())
    return out


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"({time.time() - started:.0f} s)")
