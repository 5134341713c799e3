"""Settling (issue 11): the head stored whole off the save's path — cold loads after it,
loads mid-burst, and the bytes of a chat settled every turn.

The chat of ``bench_hotpath.py --only load`` (~300-character messages, one more a
save, ``snapshot_every=100``), one agent per distance ``k`` of its head past the whole
snapshot at 100 saves (k = 0, 1, 8, 50, 99), in two statekeeper files and the peer's:

* ``chain``: as the saves left it (today's layout: whole snapshot, tails, events);
* ``settled``: the same saves, then :meth:`StateStore.settle` of each agent (the head a
  whole snapshot, written after the saves, the snapshot before it removed when no load
  needs it);
* mid-burst: agents settled at 150 messages, then 1, 3 and 7 more saves without a
  settle (``m1``, ``m3``, ``m7``): what a load sees while the agent is still busy.

Each load side is measured against ``SqliteSaver.get_tuple`` interleaved load by load
(p50 ratio, median [min..max] of the rounds), as ``bench_hotpath.py --only load``.
``--bytes`` instead writes a chat of 200 turns (a user and an assistant message a turn,
two saves) three ways — never settled, settled after every turn, and the peer — and
reports the stored bytes (the rows' payloads, and the file after a checkpoint).
``--cost``: the CPU of a save and of a settle (150 messages, then 40 turns of two saves
and a settle), at ``synchronous=OFF`` and FULL, a settle in one commit (SQLite's
``replace_snapshot``) and in two (the other engines' path), alternated.
``--idle``: the CPU a save costs amortised when the idle trigger settles the agent once
between bursts of 1-16 saves, against ``SqliteSaver.put``'s in the same run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_settle.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_settle.py --bytes
    PYTHONPATH=src .venv/bin/python benchmarks/bench_settle.py --cost
    PYTHONPATH=src .venv/bin/python benchmarks/bench_settle.py --idle
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages, median, table
from bench_checkpoint import sk_url
from statekeeper.store.store import StateStore

CHARS = 300
EVERY = 100
PAST = (0, 1, 8, 50, 99)
BURST = (1, 3, 7)
BURST_AT = 150


async def build(tmp: Path) -> None:
    """``chain.db``, ``settled.db`` (the same saves, then settled) and ``lg.db``."""
    msgs = make_messages(EVERY + max(PAST) + max(BURST) + 60, seed=7, chars=CHARS)
    saver = lg_open(tmp / "lg.db", "OFF")
    plans: dict[str, list[dict[str, Any]]] = {}
    for k in PAST:
        plans[f"k{k}"] = [{"messages": msgs[: i + 1]} for i in range(EVERY + k)]
    for m in BURST:
        plans[f"m{m}"] = [{"messages": msgs[: i + 1]} for i in range(BURST_AT + m)]
    try:
        for name in ("chain", "settled"):
            url = sk_url(tmp / f"{name}.db", "OFF")
            async with StateStore(
                url, durability="sync", snapshot_every=EVERY, settle_after=None
            ) as store:
                for agent, docs in plans.items():
                    burst = int(agent[1:]) if agent[0] == "m" else 0
                    for i, doc in enumerate(docs):
                        await store.save(agent, doc)
                        if name == "settled" and burst and i == len(docs) - 1 - burst:
                            await store.settle(agent)
                    if name == "settled" and not burst:
                        await store.settle(agent)
        for agent, docs in plans.items():
            cfg = lg_config(agent)
            for cp, meta, versions in lg_plan(saver, docs):
                cfg = saver.put(cfg, cp, meta, versions)
    finally:
        saver.conn.close()


def rows_read(tmp: Path) -> dict[str, str]:
    """The snapshot rows each agent's latest load starts from, per file."""
    out = {}
    for name in ("chain", "settled"):
        conn = sqlite3.connect(tmp / f"{name}.db")
        for agent in [f"k{k}" for k in PAST] + [f"m{m}" for m in BURST]:
            (head,) = conn.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent,)
            ).fetchone()
            snaps = conn.execute(
                "SELECT seq, length(payload) FROM sk_snapshots WHERE agent_id = ? ORDER BY seq",
                (agent,),
            ).fetchall()
            top = snaps[-1]
            out[f"{name}/{agent}"] = (
                f"head {head}, latest snapshot {top[0]} ({top[1]:,} B), "
                f"{head - top[0]} events after it; snapshots kept {[s for s, _ in snaps]}"
            )
        conn.close()
    return out


async def load_round(tmp: Path, loads: int, first: bool) -> dict[str, dict[str, list[float]]]:
    chain = StateStore(sk_url(tmp / "chain.db", "FULL"), cache_size=0)
    settled = StateStore(sk_url(tmp / "settled.db", "FULL"), cache_size=0)
    saver = lg_open(tmp / "lg.db", "FULL")
    out: dict[str, dict[str, list[float]]] = {}
    try:
        agents = [f"k{k}" for k in PAST] + [f"m{m}" for m in BURST]
        for agent in agents:
            cfg = lg_config(agent)
            sides: dict[str, Any] = {
                "chain": lambda a=agent: chain.load(a),
                "settled": lambda a=agent: settled.load(a),
            }
            lat: dict[str, list[float]] = {s: [] for s in (*sides, "lg")}
            await chain.load(agent)
            await settled.load(agent)
            saver.get_tuple(cfg)
            order = ["chain", "settled", "lg"]
            for i in range(loads):
                turn = order[i % 3 :] + order[: i % 3] if first else order[::-1]
                for side in turn:
                    t0 = time.perf_counter()
                    if side == "lg":
                        saver.get_tuple(cfg)
                    else:
                        await sides[side]()
                    lat[side].append(time.perf_counter() - t0)
            out[agent] = lat
    finally:
        await chain.close()
        await settled.close()
        saver.conn.close()
    return out


def load_table(rounds: list[dict[str, dict[str, list[float]]]]) -> tuple[str, dict[str, Any]]:
    rows, res = [], {}
    for agent in rounds[0]:
        per = {}
        for side in ("chain", "settled"):
            ratios = [median(r[agent][side]) / median(r[agent]["lg"]) for r in rounds]
            per[side] = (median(ratios), min(ratios), max(ratios))
        lg = median([median(r[agent]["lg"]) for r in rounds]) * 1e3
        st = median([median(r[agent]["settled"]) for r in rounds]) * 1e3
        res[agent] = {"lg_ms": lg, "settled_ms": st, **per}
        rows.append(
            [
                agent,
                f"{lg:.3f}",
                f"{st:.3f}",
                *(f"{per[s][0]:.2f}x [{per[s][1]:.2f}..{per[s][2]:.2f}]" for s in per),
            ]
        )
    head = ["agent", "get_tuple p50 ms", "settled p50 ms", "chain / peer", "settled / peer"]
    return table(head, rows), res


async def chat_bytes(tmp: Path, turns: int) -> dict[str, Any]:
    """A chat of ``turns`` turns, two saves a turn, never settled / settled every turn."""
    msgs = make_messages(2 * turns, seed=11, chars=CHARS)
    out: dict[str, Any] = {}
    for name in ("never", "every_turn"):
        path = tmp / f"bytes-{name}.db"
        async with StateStore(sk_url(path, "OFF"), durability="sync", settle_after=None) as store:
            for t in range(turns):
                for i in (2 * t, 2 * t + 1):
                    await store.save("chat", {"messages": msgs[: i + 1]})
                if name == "every_turn":
                    await store.settle("chat")
        conn = sqlite3.connect(path)
        ev = conn.execute("SELECT count(*), sum(length(payload)) FROM sk_events").fetchone()
        sn = conn.execute("SELECT count(*), sum(length(payload)) FROM sk_snapshots").fetchone()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        out[name] = {
            "events": ev[0],
            "event_bytes": ev[1],
            "snapshots": sn[0],
            "snapshot_bytes": sn[1] or 0,
            "file_bytes": path.stat().st_size,
        }
    saver = lg_open(tmp / "bytes-lg.db", "OFF")
    cfg = lg_config("chat")
    docs = [{"messages": msgs[: i + 1]} for i in range(2 * turns)]
    for cp, meta, versions in lg_plan(saver, docs):
        cfg = saver.put(cfg, cp, meta, versions)
    saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    saver.conn.execute("VACUUM")
    saver.conn.close()
    out["SqliteSaver"] = {"file_bytes": (tmp / "bytes-lg.db").stat().st_size}
    return out


async def settle_cost(
    tmp: Path, sync: str, turns: int = 40, together: bool = True, tag: str = ""
) -> dict[str, float]:
    """CPU (whole process) and wall time of a save and of a settle: a chat of 150
    messages, then ``turns`` turns of two saves and a settle (``together``: in one
    commit where the engine can, SQLite; else the two commits of the other engines)."""
    msgs = make_messages(150 + 2 * turns, seed=3, chars=CHARS)
    url = sk_url(tmp / f"cost-{sync}-{together}{tag}.db", sync)
    async with StateStore(url, durability="sync", settle_after=None) as store:
        if not together:
            store.backend.replaces_snapshots = False
        n = 0
        for n in range(1, 151):
            await store.save("a", {"messages": msgs[:n]})
        save_cpu = settle_cpu = settle_wall = 0.0
        for _ in range(turns):
            t0 = time.process_time()
            for _ in range(2):
                n += 1
                await store.save("a", {"messages": msgs[:n]})
            save_cpu += time.process_time() - t0
            t0, w0 = time.process_time(), time.perf_counter()
            await store.settle("a")
            settle_cpu += time.process_time() - t0
            settle_wall += time.perf_counter() - w0
    return {
        "save_cpu_us": save_cpu / (2 * turns) * 1e6,
        "settle_cpu_us": settle_cpu / turns * 1e6,
        "settle_wall_us": settle_wall / turns * 1e6,
    }


async def idle_cost(tmp: Path, sync: str, burst: int, turns: int = 40) -> dict[str, float]:
    """CPU a save *amortised* over an agent saving in bursts with idle gaps between
    turns, settled by the idle trigger once a gap (``settle_after=0``, each gap awaited
    with ``idle_settled``): ``burst`` saves a turn, after 150 messages; and
    ``SqliteSaver.put``'s CPU a save over the same documents, same ``synchronous``, and
    the store's with no trigger (``settle_after=None``)."""
    msgs = make_messages(150 + burst * turns, seed=5, chars=CHARS)
    url = sk_url(tmp / f"idle-{sync}-{burst}.db", sync)
    async with StateStore(url, durability="sync", settle_after=0) as store:
        n = 0
        for n in range(1, 151):
            await store.save("a", {"messages": msgs[:n]})
        await store.idle_settled()
        before = store.stats().idle_settles
        assert before is not None
        t0 = time.process_time()
        for _ in range(turns):
            for _ in range(burst):
                n += 1
                await store.save("a", {"messages": msgs[:n]})
            await store.idle_settled()
        cpu = time.process_time() - t0
        after = store.stats().idle_settles
        assert after is not None
    url = sk_url(tmp / f"idle-none-{sync}-{burst}.db", sync)
    async with StateStore(url, durability="sync", settle_after=None) as store:
        for n in range(1, 151):
            await store.save("a", {"messages": msgs[:n]})
        t0 = time.process_time()
        for _ in range(turns):
            for _ in range(burst):
                n += 1
                await store.save("a", {"messages": msgs[:n]})
        bare = time.process_time() - t0
    saver = lg_open(tmp / f"idle-lg-{sync}-{burst}.db", sync)
    try:
        cfg = lg_config("a")
        docs = [{"messages": msgs[: i + 1]} for i in range(len(msgs))]
        plan = list(lg_plan(saver, docs))
        for cp, meta, versions in plan[:150]:
            cfg = saver.put(cfg, cp, meta, versions)
        t0 = time.process_time()
        for cp, meta, versions in plan[150:]:
            cfg = saver.put(cfg, cp, meta, versions)
        lg_cpu = time.process_time() - t0
    finally:
        saver.conn.close()
    saves = burst * turns
    return {
        "sk_cpu_per_save_us": cpu / saves * 1e6,
        "sk_unsettled_cpu_per_save_us": bare / saves * 1e6,
        "lg_cpu_per_save_us": lg_cpu / saves * 1e6,
        "ratio": cpu / lg_cpu,
        "settles": after.settled - before.settled,
        "turns": turns,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", action="store_true")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--cost", action="store_true", help="CPU of a save and of a settle")
    parser.add_argument(
        "--idle", action="store_true", help="CPU a save amortised, settled once an idle gap"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.cost:  # one commit and two, alternated, twice
            res = {
                f"{sync} {'one' if together else 'two'} commit(s) #{r}": asyncio.run(
                    settle_cost(tmp, sync, together=together, tag=str(r))
                )
                for r in (1, 2)
                for sync in ("OFF", "FULL")
                for together in (True, False)
            }
            print(json.dumps(res, indent=1))
            return res
        if args.idle:
            res = {
                f"{sync} burst={burst}": asyncio.run(idle_cost(tmp, sync, burst))
                for sync in ("OFF", "FULL")
                for burst in (1, 2, 4, 8, 16)
            }
            print(json.dumps(res, indent=1))
            return res
        if args.bytes:
            res = asyncio.run(chat_bytes(tmp, args.turns))
            print(json.dumps(res, indent=1))
            return res
        asyncio.run(build(tmp))
        for line in rows_read(tmp).items():
            print(*line, sep=": ")
        rounds = [asyncio.run(load_round(tmp, args.loads, r % 2 == 0)) for r in range(args.rounds)]
        text, res = load_table(rounds)
        print(text)
        return res


if __name__ == "__main__":
    main()
