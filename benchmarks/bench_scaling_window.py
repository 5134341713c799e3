"""Where a write and a load go in a store of many agents, statekeeper vs SqliteSaver
(issue 11, helper scale11), on the files of ``bench_scaling.py --peer`` (built by it, or
by this script, under ``.bench/``: 1k / 100k / 1M agents, each a 3-step chat).

Per size and side (``--what``), each on a scratch copy of the cached file:

- ``instr``: callgrind instructions per operation, instrumentation on only around
  ``--ops`` cold loads (``StateStore.load`` of agents never loaded; ``SqliteSaver.get_tuple``),
  then around the next durable write of each of them (``StateStore.save`` /
  ``SqliteSaver.put``, ``synchronous=FULL``), after 20 of each outside the window (every
  thread counted: ``callgrind_window.py``). The store runs with ``witness=False``: its
  witness file is written on a timer, a cost per interval, and a window under callgrind
  lasts ~50x longer than without it;
- ``frames``: WAL frames per write (the WAL's size after the writes with every checkpoint
  held off) and the pages each write dirtied, by B-tree (the WAL's frames' page numbers
  looked up in ``dbstat``);
- ``layout``: per B-tree its depth (levels above the leaves), cells, pages and average
  cell payload (``dbstat``);
- ``wall``: wall p50 of a cold load and the next durable write, every side interleaved
  per agent (the order rotating per round), with the spread of the round p50s.

Sides (``--sides``): ``lg`` (SqliteSaver), ``sk`` (statekeeper's file as built) and two
layouts of a copy of it, built once beside it: ``sk-wr`` (``sk_events`` rebuilt
``WITHOUT ROWID``: one B-tree clustered by ``(agent_id, seq)`` instead of a rowid table
and its primary-key index) and ``sk-nowritten`` (without the ``sk_agents_written``
index: what keeping the agents by last write costs; a file of the current schema
version is opened without re-creating it). Run::

    .venv/bin/python benchmarks/bench_scaling.py --peer --quick      # builds the files once
    .venv/bin/python benchmarks/bench_scaling_window.py --sizes 1000 1000000 --ops 100
    .venv/bin/python benchmarks/bench_scaling_window.py --sides sk sk-wr sk-nowritten lg \\
        --what frames wall --rounds 6 --per-round 100

``PYTHONPATH=<another tree's src>`` measures another tree (its own files: the stores are
rebuilt when the schema version differs, see ``bench_scaling.fingerprint``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import random
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scaling
import scaling_peer
from _common import lg_open, lg_plan, table
from callgrind_window import helper, run_window

WARM = 20

#: the layouts a copy of statekeeper's file can be rebuilt into (``--layouts``): ``v4``
#: is the file as ``bench_scaling.build_agents`` made it; ``wr``: ``sk_events`` rebuilt
#: ``WITHOUT ROWID`` (one B-tree clustered by ``(agent_id, seq)`` instead of a rowid
#: table and its primary-key index); ``nowritten``: without the ``sk_agents_written``
#: index (what keeping the by-last-write order costs; a file of the current schema
#: version is opened without re-creating it)
LAYOUTS = ("v4", "wr", "nowritten")

_WR = (
    "CREATE TABLE sk_events_wr (agent_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " kind TEXT NOT NULL, ts REAL NOT NULL, payload BLOB NOT NULL, checksum BLOB NOT NULL,"
    " PRIMARY KEY (agent_id, seq)) WITHOUT ROWID",
    "INSERT INTO sk_events_wr SELECT agent_id, seq, kind, ts, payload, checksum"
    " FROM sk_events ORDER BY agent_id, seq",
    "DROP TABLE sk_events",
    "ALTER TABLE sk_events_wr RENAME TO sk_events",
    "CREATE TRIGGER sk_feed_append AFTER INSERT ON sk_events BEGIN"
    " INSERT INTO sk_feed (agent_id, seq) VALUES (new.agent_id, new.seq); END",
)


def variant(src: Path, n: int, layout: str) -> Path:
    """``src`` (statekeeper's file of ``n`` agents) in ``layout``: built once beside it."""
    if layout == "v4":
        return src
    path = src.with_name(f"agents-{layout}-{n}.db")
    if path.exists():
        return path
    tmp = scaling_peer.scratch(src, path.name + ".building")
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN IMMEDIATE")
    for statement in _WR if layout == "wr" else ("DROP INDEX sk_agents_written",):
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.replace(tmp, path)
    return path


def pick(n: int, ops: int, seed: int = 11) -> list[str]:
    return [bench_scaling.agent_id(i) for i in random.Random(seed).sample(range(n), WARM + ops)]


# ------------------------------------------------------------------------ children


async def sk_child(path: Path, n: int, ops: int, which: str, out: Path, window: bool) -> None:
    from statekeeper.store.store import StateStore

    lib = ctypes.CDLL(str(helper(out))) if window else None
    ids = pick(n, ops)
    step = scaling_peer.docs()[3]
    # witness=False: the witness file is written on a timer (its cost per interval, not
    # per write), and under callgrind a window lasts ~50x longer than outside it
    store = StateStore(f"sqlite:///{path}", durability="sync", witness=False)
    try:
        for aid in ids[:WARM]:
            await store.load(aid)
            await store.save(aid, step)
        if lib is not None and which == "load":
            lib.cg_start()
        for aid in ids[WARM:]:
            await store.load(aid)
        if lib is not None and which == "load":
            lib.cg_stop()
        if lib is not None and which == "write":
            lib.cg_start()
        for aid in ids[WARM:]:
            await store.save(aid, step)
        if lib is not None and which == "write":
            lib.cg_stop()
    finally:
        if window:  # (frames: left open, the WAL kept; the process ends with os._exit)
            await store.close()


def lg_child(path: Path, n: int, ops: int, which: str, out: Path, window: bool) -> None:
    lib = ctypes.CDLL(str(helper(out))) if window else None
    ids = pick(n, ops)
    saver = lg_open(path, "FULL")
    if not window:
        saver.conn.execute("PRAGMA wal_autocheckpoint = 0")
    [(cp, meta, versions)] = lg_plan(saver, scaling_peer.docs())[3:]

    def cfg(aid: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": aid, "checkpoint_ns": ""}}

    try:
        for aid in ids[:WARM]:
            saver.put(saver.get_tuple(cfg(aid)).config, cp, meta, versions)
        if lib is not None and which == "load":
            lib.cg_start()
        tuples = [saver.get_tuple(cfg(aid)) for aid in ids[WARM:]]
        if lib is not None and which == "load":
            lib.cg_stop()
        if lib is not None and which == "write":
            lib.cg_start()
        for tup in tuples:
            saver.put(tup.config, cp, meta, versions)
        if lib is not None and which == "write":
            lib.cg_stop()
    finally:
        if window:
            saver.conn.close()


def child(argv: list[str]) -> None:
    side, path, n, ops, which, out = argv
    window = which != "frames"
    if side == "sk":
        if not window:  # hold every checkpoint off: the WAL keeps every frame written
            from statekeeper.backends.sqlite import backend as sk_backend
            from statekeeper.backends.sqlite import checkpoints as sk_sqlite

            sk_sqlite.CHECKPOINT_PAGES = 10**12  # type: ignore[misc]
            sk_sqlite.CALIBRATE_PAGES = sk_backend.CALIBRATE_PAGES = 10**12  # type: ignore[misc]
        asyncio.run(sk_child(Path(path), int(n), int(ops), which, Path(out), window))
    else:
        lg_child(Path(path), int(n), int(ops), which, Path(out), window)
    if not window:
        os._exit(0)  # no close: the last connection's close would checkpoint the WAL


# ------------------------------------------------------------------------ parent


def frames_by_tree(db: Path, wal_from: int) -> dict[str, float]:
    """Dirtied pages of the WAL's frames from index ``wal_from`` on, by B-tree name (the
    page numbers each frame holds, looked up in ``dbstat`` of the file + WAL)."""
    wal = Path(f"{db}-wal").read_bytes()
    page_size = int.from_bytes(wal[8:12], "big")
    pages: list[int] = []
    for off in range(32 + wal_from * (page_size + 24), len(wal), page_size + 24):
        pages.append(int.from_bytes(wal[off : off + 4], "big"))
    uri = "file:" + str(db) + "?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        owner: dict[int, str] = {}
        want = set(pages)
        for name, pageno in conn.execute("SELECT name, pageno FROM dbstat"):
            if pageno in want:
                owner[pageno] = name
    counts: dict[str, float] = {}
    for p in pages:
        key = owner.get(p, "(freelist/overflow?)")
        counts[key] = counts.get(key, 0) + 1
    return counts


def frames(side: str, src: Path, n: int, ops: int, out: Path) -> dict[str, Any]:
    tmp = scaling_peer.scratch(src, f"frames-{side}.db")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    import subprocess

    subprocess.run(
        [sys.executable, __file__, "child", side, str(tmp), str(n), str(ops), "frames", str(out)],
        check=True,
        env=env,
    )
    wal = Path(f"{tmp}-wal").stat().st_size
    page_size = int.from_bytes(Path(f"{tmp}-wal").read_bytes()[8:12], "big")
    total = (wal - 32) // (page_size + 24)
    by_tree = frames_by_tree(tmp, 0)
    scaling_peer.drop(tmp)
    # the warm-up's writes are in the WAL too: per write over all of them
    writes = WARM + ops
    return {
        "frames_per_write": total / writes,
        "by_tree": {k: round(v / writes, 2) for k, v in sorted(by_tree.items())},
    }


def layout(path: Path) -> list[list[Any]]:
    uri = "file:" + str(path) + "?mode=ro"
    rows = []
    with sqlite3.connect(uri, uri=True) as conn:
        stats = conn.execute(
            "SELECT name, ncell, payload, pageno FROM dbstat('main', 1)"
            " WHERE ncell > 0 ORDER BY name"
        ).fetchall()
        for name, ncell, payload, pages in stats:
            first_leaf = conn.execute(
                "SELECT path FROM dbstat WHERE name = ? AND pagetype = 'leaf' LIMIT 1", (name,)
            ).fetchone()
            depth = first_leaf[0].count("/") - 1 if first_leaf else 0
            rows.append([name, depth, ncell, pages, round(payload / max(ncell, 1))])
    return rows


async def wall(paths: dict[str, Path], n: int, rounds: int, per_round: int) -> dict[str, Any]:
    """Wall p50 of a cold load and the next durable write, every side interleaved per
    agent (the order rotating per round), each side on a scratch copy of its file."""
    import time

    from statekeeper.store.store import StateStore

    sides = list(paths)
    scratch = {side: scaling_peer.scratch(p, f"wall-{side}.db") for side, p in paths.items()}
    step = scaling_peer.docs()[3]
    stores = {
        s: StateStore(f"sqlite:///{p}", durability="sync") for s, p in scratch.items() if s != "lg"
    }
    saver = lg_open(scratch["lg"], "FULL") if "lg" in scratch else None
    plan = lg_plan(saver, scaling_peer.docs())[3] if saver is not None else None
    lat: dict[str, list[float]] = {f"{s}_{op}": [] for s in sides for op in ("load", "write")}
    ids = pick(n, rounds * per_round)
    try:
        for i, aid in enumerate(ids):
            k = (i - WARM) // per_round if i >= WARM else 0
            order = sides[k % len(sides) :] + sides[: k % len(sides)]
            for side in order:
                t0 = time.perf_counter()
                if side == "lg":
                    assert saver is not None and plan is not None
                    cfg = {"configurable": {"thread_id": aid, "checkpoint_ns": ""}}
                    tup = saver.get_tuple(cfg)
                    t1 = time.perf_counter()
                    saver.put(tup.config, *plan)
                else:
                    await stores[side].load(aid)
                    t1 = time.perf_counter()
                    await stores[side].save(aid, step)
                t2 = time.perf_counter()
                if i >= WARM:
                    lat[f"{side}_load"].append(t1 - t0)
                    lat[f"{side}_write"].append(t2 - t1)
    finally:
        for store in stores.values():
            await store.close()
        if saver is not None:
            saver.conn.close()
        for p in scratch.values():
            scaling_peer.drop(p)
    out: dict[str, Any] = {}
    for key, values in lat.items():
        values.sort()
        out[f"{key}_p50"] = values[len(values) // 2]
        # the spread: p50 of each round
        per = []
        for r in range(rounds):
            chunk = sorted(lat[key][r * per_round : (r + 1) * per_round])
            if chunk:
                per.append(chunk[len(chunk) // 2])
        out[f"{key}_rounds"] = per
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 1_000_000])
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["sk", "lg"],
        help="sk (statekeeper's file as built), sk-wr, sk-nowritten (the layouts), lg",
    )
    parser.add_argument(
        "--what",
        nargs="+",
        default=["instr", "frames", "layout"],
        choices=["instr", "frames", "layout", "wall"],
    )
    parser.add_argument("--rounds", type=int, default=6, help="wall: interleaved rounds")
    parser.add_argument("--per-round", type=int, default=150, help="wall: agents per round")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "sk-scaling-cg")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    for n in args.sizes:
        built = asyncio.run(bench_scaling.build_agents(n, bench_scaling.log))
        src: dict[str, Path] = {}
        for side in args.sides:
            if side == "lg":
                src[side] = scaling_peer.build_peer(
                    n, bench_scaling.BENCH_DIR, bench_scaling.agent_id, print
                )
            else:
                src[side] = variant(built, n, side.partition("-")[2] or "v4")
        if "wall" in args.what:
            res = asyncio.run(wall(src, n, args.rounds, args.per_round))
            result[f"wall-{n}"] = res
            print(f"wall-{n}", json.dumps(res), flush=True)
        for side in args.sides:
            kind = "lg" if side == "lg" else "sk"
            key = f"{side}-{n}"
            res = {}
            if "instr" in args.what:
                for which in ("load", "write"):
                    tmp = scaling_peer.scratch(src[side], f"cg-{side}.db")
                    count = run_window(
                        __file__,
                        ["child", kind, str(tmp), str(n), str(args.ops), which, str(args.out)],
                        args.out,
                        f"cg-{side}-{which}",
                    )
                    scaling_peer.drop(tmp)
                    res[f"{which}_instr"] = round(count / args.ops)
            if "frames" in args.what:
                res.update(frames(kind, src[side], n, args.ops, args.out))
            if "layout" in args.what:
                res["layout"] = layout(src[side])
            if res:
                result[key] = res
                print(key, json.dumps(res), flush=True)
    rows = [
        [k, v.get("load_instr", ""), v.get("write_instr", ""), v.get("frames_per_write", "")]
        for k, v in result.items()
        if not k.startswith("wall")
    ]
    print(table(["side-agents", "instr/load", "instr/write", "WAL frames/write"], rows))
    for k, v in result.items():
        if k.startswith("wall"):
            names = sorted({x.rsplit("_", 2)[0] for x in v})
            print(f"\n{k} (ms, p50 [round p50s])")
            for name in names:
                for op in ("load", "write"):
                    r = v[f"{name}_{op}_rounds"]
                    print(
                        f"  {name} {op}: {v[f'{name}_{op}_p50'] * 1e3:.3f}"
                        f" [{min(r) * 1e3:.3f}..{max(r) * 1e3:.3f}]"
                    )
        if "layout" in v:
            print(
                f"\n{k}\n" + table(["B-tree", "depth", "cells", "pages", "avg cell B"], v["layout"])
            )
        if "by_tree" in v:
            print(f"{k} pages dirtied per write by B-tree: {v['by_tree']}")


if __name__ == "__main__":
    main()
