"""The floor of a cold load under each snapshot layout, against ``SqliteSaver.get_tuple``
(issue 11's goal: a cold load <= ``get_tuple`` wherever the head sits), in one process,
loads interleaved per load, rounds alternating the order (docs/benchmarks.md, "cold7").

The chat of ``bench_hotpath.py --only load`` (~300-character messages, one more per
save), the head ``K`` events past the whole snapshot at 100 saves (K = 0, 1, 8, 50, 99):

* ``lg``: ``SqliteSaver.get_tuple`` of the same chat (one checkpoint per save).
* ``sk``: ``StateStore(url, cache_size=0).load`` on a store written with
  ``snapshot_every=100`` (today's layout: a whole snapshot, tail snapshots every 8
  events on it, each 4th cumulative, the events after the latest one).
* ``whole``: the same load on a store whose head is a whole snapshot at the same head
  (written with ``snapshot_every=100+K``): what a load costs when the state it returns
  is stored whole at the head — the layout "the head state kept materialised".
* ``floor2``: what any verified load of today's layout must do, no Python around it:
  the store's own statement (head, latest snapshot, events after it) and, for a tail,
  its whole snapshot and base in a second one; each row's hash (the algorithm its
  header names) and parse (``bench_coldload.py``'s floor).
* ``floor1``: the same rows in ONE statement, the chain's seqs known before any body is
  read (as a column holding a tail's whole snapshot and base would tell them).
* ``floorw``: the floor of the ``whole`` layout (one statement, one snapshot).

Run::

    .venv/bin/python benchmarks/bench_coldload_layouts.py            # ~1 min
    .venv/bin/python benchmarks/bench_coldload_layouts.py --loads 100 --rounds 3
    .venv/bin/python benchmarks/bench_coldload_layouts.py --build /tmp/lay
    .venv/bin/python benchmarks/bench_coldload_layouts.py --cg /tmp/lay floor1 k50
    .venv/bin/python benchmarks/bench_coldload_layouts.py --cpu /tmp/lay

(``--cg <dir> <side> <agent>``: instructions per load of one side, callgrind counting
only around 100 loads: ``callgrind_window.py``'s helper, on the files ``--build`` made;
``--cpu <dir>``: CPU per load of every side in a tight loop, the best of 9 rounds.)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages, median, table
from bench_hotpath import fmt_spread, loadavg, spread
from callgrind_window import helper, run_window
from statekeeper.backends.sqlite.reads import _READ_SNAPSHOTS_AT, _READ_STATE
from statekeeper.codec.formats import fast_unpackb
from statekeeper.codec.widehash import wide_blake3
from statekeeper.store.store import StateStore

KS = (0, 1, 8, 50, 99)
SIDES = ("lg", "sk", "whole", "floor2", "floor1", "floorw")
#: today's statement and, after it, the chain's two snapshots (their seqs bound)
_ONE = (
    _READ_STATE + " UNION ALL SELECT seq, NULL, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
    " FROM sk_snapshots WHERE agent_id = ?1 AND seq = ?2 AND ?2 > 0"
    " UNION ALL SELECT seq, NULL, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
    " FROM sk_snapshots WHERE agent_id = ?1 AND seq = ?3 AND ?3 > ?2"
)


def _url(path: Path, sync: str) -> str:
    return f"sqlite:///{path}?synchronous={sync}"


async def build(tmp: Path) -> dict[str, dict[str, int]]:
    """``chain.db`` (``snapshot_every=100``), ``whole.db`` (the head a whole snapshot),
    ``lg.db`` (the peer), the same chat; per agent the chain's seqs (0: none)."""
    msgs = make_messages(100 + max(KS), seed=7, chars=300)
    saver = lg_open(tmp / "lg.db", "OFF")
    chains: dict[str, dict[str, int]] = {}
    try:
        async with StateStore(_url(tmp / "chain.db", "OFF"), snapshot_every=100) as store:
            for k in KS:
                docs = [{"messages": msgs[: i + 1]} for i in range(100 + k)]
                for doc in docs:
                    await store.save(f"k{k}", doc)
                cfg = lg_config(f"k{k}")
                for cp, meta, versions in lg_plan(saver, docs):
                    cfg = saver.put(cfg, cp, meta, versions)
                _, _, snap, _ = await store.backend.read_state(f"k{k}")
                assert snap is not None
                unpackb: Any = fast_unpackb()
                body = unpackb(memoryview(snap.payload)[35:])
                whole, base = body.get("w", 0), body.get("base", 0)
                chains[f"k{k}"] = {"w": whole, "base": base}
        for k in KS:
            url = _url(tmp / "whole.db", "OFF")
            async with StateStore(url, snapshot_every=100 + k) as store:
                for i in range(100 + k):
                    await store.save(f"k{k}", {"messages": msgs[: i + 1]})
    finally:
        saver.conn.close()
    return chains


def verified(row: bytes) -> Any:
    """The row's hash (the algorithm its header names) and its body's parse."""
    if row[1] & 0x40:
        wide_blake3(b"", row)  # type: ignore[misc]
    else:
        hashlib.sha256(row).digest()
    if row[1] & 3 == 1:
        unpackb: Any = fast_unpackb()
        return unpackb(memoryview(row)[35:])
    return orjson.loads(memoryview(row)[35:])


async def load_round(
    tmp: Path,
    chains: dict[str, dict[str, int]],
    loads: int,
    flip: bool,
    window: tuple[str, str, Any] | None = None,
    cpu: bool = False,
) -> Any:
    """``loads`` loads of every side per agent, interleaved; or (``window``: side,
    agent, helper) that side's loads only, counted by callgrind; or (``cpu``) per agent
    and side the CPU a load (``time.thread_time``) of ``loads`` loads in a row, each side
    in turn, the best of 9 rounds."""
    chain = StateStore(_url(tmp / "chain.db", "FULL"), cache_size=0)
    whole = StateStore(_url(tmp / "whole.db", "FULL"), cache_size=0)
    saver = lg_open(tmp / "lg.db", "FULL")
    ro = {n: sqlite3.connect(f"file:{tmp / n}.db?mode=ro", uri=True) for n in ("chain", "whole")}

    def floor2(agent: str) -> list[Any]:
        rows = ro["chain"].execute(_READ_STATE, (agent,)).fetchall()
        out = [verified(r[3]) for r in rows if r[0] != -(2**63)]
        seqs = chains[agent]
        if seqs["w"]:
            got = ro["chain"].execute(_READ_SNAPSHOTS_AT, (agent, seqs["w"], seqs["base"]))
            out += [verified(r[2]) for r in got.fetchall()]
        return out

    def floor1(agent: str) -> list[Any]:
        seqs = chains[agent]
        rows = ro["chain"].execute(_ONE, (agent, seqs["w"], seqs["base"])).fetchall()
        return [verified(r[3]) for r in rows if r[0] != -(2**63)]

    def floorw(agent: str) -> list[Any]:
        rows = ro["whole"].execute(_READ_STATE, (agent,)).fetchall()
        return [verified(r[3]) for r in rows if r[0] != -(2**63)]

    out: dict[str, dict[str, list[float]]] = {}
    try:
        if window is not None:
            side, agent, cg = window
            named: dict[str, Any] = {"sk": chain.load, "whole": whole.load, "floor2": floor2}
            fn: Any = {**named, "floor1": floor1, "floorw": floorw}.get(side)
            cfg = lg_config(agent)
            run = (lambda: saver.get_tuple(cfg)) if side == "lg" else (lambda: fn(agent))
            for i in range(loads + 5):
                if i == 5:
                    cg.cg_start()
                r = run()
                if asyncio.iscoroutine(r):
                    await r
            cg.cg_stop()
            return out
        for k in KS:
            agent = f"k{k}"
            cfg = lg_config(agent)
            sides: dict[str, Any] = {
                "lg": lambda c=cfg: saver.get_tuple(c),
                "sk": lambda a=agent: chain.load(a),
                "whole": lambda a=agent: whole.load(a),
                "floor2": lambda a=agent: floor2(a),
                "floor1": lambda a=agent: floor1(a),
                "floorw": lambda a=agent: floorw(a),
            }
            for fn in sides.values():  # first touch: untimed
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            if cpu:
                best = dict.fromkeys(SIDES, float("inf"))
                for _ in range(9):
                    for side in SIDES:
                        began = time.thread_time()
                        for _ in range(loads):
                            r = sides[side]()
                            if asyncio.iscoroutine(r):
                                await r
                        best[side] = min(best[side], (time.thread_time() - began) / loads)
                out[agent] = {side: [t] for side, t in best.items()}
                continue
            order = list(reversed(SIDES)) if flip else list(SIDES)
            lat: dict[str, list[float]] = {s: [] for s in SIDES}
            for i in range(loads):
                for side in order[i % len(order) :] + order[: i % len(order)]:
                    t0 = time.perf_counter()
                    r = sides[side]()
                    if asyncio.iscoroutine(r):
                        await r
                    lat[side].append(time.perf_counter() - t0)
            out[agent] = lat
    finally:
        await chain.close()
        await whole.close()
        saver.conn.close()
        for conn in ro.values():
            conn.close()
    return out


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        chains = await build(tmp)
        rounds = [
            await load_round(tmp, chains, args.loads, bool(r % 2)) for r in range(args.rounds)
        ]
    res: dict[str, Any] = {"load_average": loadavg(), "chains": chains, "rows": {}}
    for agent in chains:
        row: dict[str, Any] = {}
        for side in SIDES:
            row[side] = {
                "p50_ms": median([median(r[agent][side]) for r in rounds]) * 1e3,
                "ratio": spread([median(r[agent][side]) / median(r[agent]["lg"]) for r in rounds]),
            }
        res["rows"][agent] = row
    return res


def render(res: dict[str, Any]) -> str:
    head = ["head", *(f"{s} / get_tuple" for s in SIDES[1:]), "get_tuple p50 ms"]
    rows = []
    for agent, row in res["rows"].items():
        rows.append(
            [
                f"{agent} ({100 + int(agent[1:])} msgs)",
                *(fmt_spread(row[s]["ratio"], ".2f", "x") for s in SIDES[1:]),
                f"{row['lg']['p50_ms']:.3f}",
            ]
        )
    return table(head, rows)


async def built(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before anything is measured)
    (out / "chains.json").write_text(json.dumps(await build(out)))


async def counted(out: Path, side: str, agent: str) -> None:
    import ctypes

    chains = json.loads((out / "chains.json").read_text())
    await load_round(out, chains, 100, False, (side, agent, ctypes.CDLL(str(helper(out)))))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", type=Path)
    parser.add_argument("--cg", nargs=3)
    parser.add_argument("--child", nargs=3)
    parser.add_argument("--cpu", type=Path)
    args = parser.parse_args(argv)
    if args.cpu is not None:
        chains = json.loads((args.cpu / "chains.json").read_text())
        got = asyncio.run(load_round(args.cpu, chains, 100, False, cpu=True))
        print("CPU us a load (best of 9 x 100, each side in turn); / get_tuple")
        for agent, row in got.items():
            us = " ".join(f"{s} {row[s][0] * 1e6:.1f}" for s in SIDES)
            ratios = " ".join(f"{s} {row[s][0] / row['lg'][0]:.2f}x" for s in SIDES[1:])
            print(f"{agent}: {us} | {ratios}")
        return {"cpu": got}
    if args.build is not None:
        asyncio.run(built(args.build))
        return {}
    if args.child is not None:
        asyncio.run(counted(Path(args.child[0]), args.child[1], args.child[2]))
        return {}
    if args.cg is not None:
        out, side, agent = Path(args.cg[0]), args.cg[1], args.cg[2]
        total = run_window(__file__, ["--child", *args.cg], out, f"cg-{side}-{agent}")
        print(f"{side} {agent} {total // 100} instructions a load")
        return {"instructions": total // 100}
    print(f"load average at start: {loadavg()}")
    res = asyncio.run(amain(args))
    print(render(res))
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
