"""Cold load of the latest state wherever the head sits (issue 11), vs SqliteSaver.

One process, rounds alternating which side goes first, loads interleaved per load;
medians with their spread (min..max of the per-round ratio, p25..p75 of latencies).
Chat states: plain-dict messages of ~300 characters, one message added per save.

* ``every=100``: ``snapshot_every=100`` (explicit), the head
  0/1/50/99 events past the last snapshot (100 + k saves).
* ``default``: a store with the default snapshot policy (``"bounded"``: by replay cost,
  :mod:`statekeeper.store.snapshots`), the head at its first snapshot at or after 100
  saves (k=0), one event past it, half-way and at the most events the policy lets a
  load replay (the save before its next snapshot): the worst head a default-configured
  agent can have. The positions are found by saving the chat once in a probe file.
* ``cost``: ``snapshot_every="cost"`` (opt-in: by replay cost), one agent per head
  position 100..100+P-1 saves: every position of at least one whole snapshot interval.
* Each statekeeper load is a ``StateStore(url, cache_size=0).load`` (every load reads
  storage, verifies and folds), the peer's ``SqliteSaver.get_tuple`` of the same chat
  (the same documents put as checkpoints, one per save).
* ``two reads``: the same statekeeper store with the read path forced back to two
  statements (head, then snapshot + tail) — what a cold load was before
  ``Backend.read_state`` — to isolate the one-statement change in the same run.
* ``floor``: what any verified load of that state must do at least, on the same file
  and the same SQLite connection settings: one ``SELECT`` of the latest snapshot row
  and the event rows after it and, when that snapshot is a tail (store/tails.py: its
  body names its whole snapshot ``w`` and its ``base``), one more of those two rows;
  the hash of each row's bytes (the record's checksum algorithm, as its header names
  it: SHA-256, or BLAKE3 for a record written with ``checksum="auto"`` (the default,
  from 4 KiB) or ``"blake3"``, at full SIMD width where statekeeper's C hash is built:
  ``statekeeper.codec.widehash``; ``--checksum`` chooses the stores') and the parse of its
  body (``orjson.loads``, or for a record stored as a save's packed bytes the fastest
  msgpack parser installed: ``ormsgpack.unpackb`` where statekeeper uses it,
  ``statekeeper.codec.formats.fast_unpackb``, else ``msgpack.unpackb``) — no chain
  check, no ops applied, no head check, no Python around it. (Before "cold11" the floor
  read the latest snapshot row alone: for a head at a tail it hashed and parsed the
  tail's few KB, not the whole snapshot and base a load of it needs, nor the events.)
* A fresh process (interpreter + import + open + first load) on the worst ``cost``
  position, statekeeper vs SqliteSaver, paired trials (``bench_hotpath.fresh_process``).

Run::

    .venv/bin/python benchmarks/bench_coldload.py            # ~2 min on a quiet machine
    .venv/bin/python benchmarks/bench_coldload.py --quick
    .venv/bin/python benchmarks/bench_coldload.py --quick --checksum sha256   # as before
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

import blake3
import msgpack  # type: ignore[import-untyped]
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, machine, make_messages, median, percentile, table
from bench_checkpoint import sk_url
from bench_hotpath import fmt_spread, fresh_process, fresh_table, loadavg, spread
from statekeeper.codec.formats import fast_unpackb
from statekeeper.store.store import StateStore

try:
    from statekeeper.codec.widehash import wide_blake3
except ImportError:  # a tree from before it (an A/B against an older commit)
    wide_blake3 = None

#: the floor's msgpack parser: the fastest installed (what a load may use at best)
UNPACKB = fast_unpackb() or msgpack.unpackb

CHARS = 300
EVERY_K = (0, 1, 50, 99)
#: the statekeeper stores' record checksum (``--checksum``; None: the default)
CHECKSUM: dict[str, str | None] = {"checksum": None}


#: the floor's first statement: the latest snapshot (kind NULL) and the events after it
_FLOOR_LATEST = (
    "SELECT payload, NULL FROM sk_snapshots WHERE agent_id = ?1 AND seq ="
    " (SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1)"
    " UNION ALL SELECT payload, kind FROM sk_events WHERE agent_id = ?1"
    " AND seq > (SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1)"
)
#: ... and, for a tail snapshot, its whole snapshot and its base (two primary-key lookups)
_FLOOR_CHAIN = (
    "SELECT payload FROM sk_snapshots WHERE agent_id = ?1 AND seq = ?2"
    " UNION ALL SELECT payload FROM sk_snapshots WHERE agent_id = ?1 AND seq = ?3 AND ?3 > ?2"
)

#: the snapshot_every= of each mode's file (None: the store's default)
MODES: dict[str, Any] = {"every100": 100, "cost": "cost", "default": None}


async def default_positions(tmp: Path, msgs: list[Any]) -> list[tuple[str, int]]:
    """Saves at which the default policy's head is 0, 1, half-way and the most events
    past its snapshot (the first snapshot at or after 100 saves, and its interval)."""
    k_after: list[int] = []
    async with StateStore(sk_url(tmp / "probe.db", "OFF"), checksum=CHECKSUM["checksum"]) as st:
        for i in range(len(msgs)):
            await st.save("probe", {"messages": msgs[: i + 1]})
            _, _, _, events = await st.backend.read_state("probe")
            k_after.append(len(events))
    first = next(i for i in range(99, len(k_after)) if k_after[i] == 0)
    worst = first
    while worst + 1 < len(k_after) and k_after[worst + 1] > 0:
        worst += 1
    k = worst - first
    return [(f"d{k_}", first + 1 + k_) for k_ in sorted({0, 1, k // 2, k})]


async def build(tmp: Path, positions: int) -> dict[str, Any]:
    """Three statekeeper files (every=100, cost, default) and one SqliteSaver file,
    same chats."""
    msgs = make_messages(100 + max(max(EVERY_K), positions, 100), seed=7, chars=CHARS)
    saver = lg_open(tmp / "lg.db", "OFF")
    agents: dict[str, dict[str, Any]] = {}
    plans: dict[str, list[tuple[str, int]]] = {
        "every100": [(f"k{k}", 100 + k) for k in EVERY_K],
        "cost": [(f"h{100 + p}", 100 + p) for p in range(positions)],
        "default": await default_positions(tmp, msgs),
    }
    try:
        for mode, plan in plans.items():
            url = sk_url(tmp / f"{mode}.db", "OFF")
            every = MODES[mode]
            policy: dict[str, Any] = {} if every is None else {"snapshot_every": every}
            async with StateStore(
                url, durability="sync", checksum=CHECKSUM["checksum"], **policy
            ) as store:
                for agent, saves in plan:
                    docs = [{"messages": msgs[: i + 1]} for i in range(saves)]
                    for doc in docs:
                        await store.save(agent, doc)
                    cfg = lg_config(f"{mode}-{agent}")
                    for cp, meta, versions in lg_plan(saver, docs):
                        cfg = saver.put(cfg, cp, meta, versions)
                    _, _, snap, events = await store.backend.read_state(agent)
                    agents[f"{mode}-{agent}"] = {
                        "mode": mode,
                        "agent": agent,
                        "msgs": saves,
                        "k": len(events),
                        "snapshot_bytes": len(snap.payload) if snap else 0,
                        "tail_bytes": sum(len(e.payload) for e in events),
                    }
    finally:
        saver.conn.close()
    return agents


async def load_round(tmp: Path, agents: dict[str, Any], loads: int, sk_first: bool) -> dict:
    stores = {mode: StateStore(sk_url(tmp / f"{mode}.db", "FULL"), cache_size=0) for mode in MODES}
    two = StateStore(sk_url(tmp / "cost.db", "FULL"), cache_size=0)
    two._reads.native_state = False  # the read path before read_state: two statements
    saver = lg_open(tmp / "lg.db", "FULL")
    bare = {mode: sqlite3.connect(f"file:{tmp / f'{mode}.db'}?mode=ro", uri=True) for mode in MODES}

    b3 = wide_blake3

    def verified(row: Any) -> Any:
        # the hash the record's header names (bit 6: BLAKE3), as a verified load must
        # (BLAKE3 at full SIMD width where statekeeper's C hash is built, as loads run it)
        if row[1] & 0x40:
            b3(b"", row) if b3 is not None else blake3.blake3(row).digest()
        else:
            hashlib.sha256(row).digest()
        if row[1] & 3 == 1:  # msgpack: a save's packed bytes
            return UNPACKB(memoryview(row)[35:])
        return orjson.loads(memoryview(row)[35:])

    def floor(mode: str, agent: str) -> Any:
        conn = bare[mode]
        rows = conn.execute(_FLOOR_LATEST, (agent,)).fetchall()
        out = [verified(r[0]) for r in rows]
        body = out[0] if rows and rows[0][1] is None else None
        if type(body) is dict and "w" in body:  # a tail: its whole snapshot and base too
            for r in conn.execute(_FLOOR_CHAIN, (agent, body["w"], body["base"])).fetchall():
                out.append(verified(r[0]))
        return out

    out: dict[str, Any] = {}
    try:
        for key, info in agents.items():
            store = stores[info["mode"]]
            agent, cfg = info["agent"], lg_config(key)
            sides: dict[str, Any] = {
                "sk": lambda s=store, a=agent: s.load(a),
                "lg": lambda c=cfg: saver.get_tuple(c),
                "floor": lambda m=info["mode"], a=agent: floor(m, a),
            }
            if info["mode"] == "cost":
                sides["two"] = lambda a=agent: two.load(a)
            for fn in sides.values():  # first touch (pages, statement cache): untimed
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            lat: dict[str, list[float]] = {s: [] for s in sides}
            order = list(sides) if sk_first else list(reversed(sides))
            for i in range(loads):
                for side in order[i % len(order) :] + order[: i % len(order)]:
                    t0 = time.perf_counter()
                    r = sides[side]()
                    if asyncio.iscoroutine(r):
                        await r
                    lat[side].append(time.perf_counter() - t0)
            out[key] = lat
    finally:
        for s in (*stores.values(), two):
            await s.close()
        saver.conn.close()
        for conn in bare.values():
            conn.close()
    return out


def summary(rounds: list[dict[str, Any]], agents: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key in agents:
        sides = rounds[0][key].keys()
        row: dict[str, Any] = {}
        for side in sides:
            pool = [x for r in rounds for x in r[key][side]]
            row[side] = {q: 1e3 * percentile(pool, q) for q in (25, 50, 75)}
        row["ratio"] = spread([median(r[key]["sk"]) / median(r[key]["lg"]) for r in rounds])
        row["floor_ratio"] = spread(
            [median(r[key]["floor"]) / median(r[key]["lg"]) for r in rounds]
        )
        if "two" in sides:
            row["one_vs_two"] = spread(
                [median(r[key]["sk"]) / median(r[key]["two"]) for r in rounds]
            )
        out[key] = row
    return out


def render(res: dict[str, Any], agents: dict[str, Any]) -> str:
    rows = []
    for key, info in agents.items():
        s = res[key]

        def ms(side: str, s: dict[str, Any] = s) -> str:
            return f"{s[side][50]:.3f} ({s[side][25]:.3f}..{s[side][75]:.3f})"

        rows.append(
            [
                info["mode"],
                f"{info['msgs']} msgs, k={info['k']}",
                f"{info['snapshot_bytes'] / 1024:.1f} / {info['tail_bytes'] / 1024:.1f}",
                ms("sk"),
                ms("two") if "two" in s else "",
                ms("lg"),
                ms("floor"),
                fmt_spread(s["ratio"], ".2f", "x"),
                fmt_spread(s["floor_ratio"], ".2f", "x"),
                fmt_spread(s["one_vs_two"], ".2f", "x") if "one_vs_two" in s else "",
            ]
        )
    return table(
        [
            "snapshots",
            "head (k = events past the snapshot)",
            "snapshot / tail KiB",
            "sk load p50 (p25..p75) ms",
            "sk two reads p50 ms",
            "get_tuple p50 ms",
            "floor p50 ms",
            "sk / get_tuple",
            "floor / get_tuple",
            "one read / two",
        ],
        rows,
    )


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    info = machine("langgraph-checkpoint", "langgraph-checkpoint-sqlite")
    print("machine:", json.dumps(info))
    print(f"load average at start: {loadavg()}")
    payload: dict[str, Any] = {"bench": "coldload", "machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="sk-cold-") as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        agents = await build(tmp, args.positions)
        print(f"built in {time.perf_counter() - t0:.0f} s")
        rounds = [
            await load_round(tmp, agents, args.loads, sk_first=r % 2 == 0)
            for r in range(args.rounds)
        ]
        res = summary(rounds, agents)
        print(f"\n## cold load ({args.loads} loads x {args.rounds} rounds, FULL)\n")
        print(render(res, agents))
        cost = [k for k in agents if agents[k]["mode"] == "cost"]
        worst = max(cost, key=lambda k: res[k]["ratio"]["median"])
        ratios = [res[k]["ratio"]["median"] for k in cost]
        print(
            f"\ncost (opt-in), every head position: ratio median {median(ratios):.2f}x, worst "
            f"{max(ratios):.2f}x ({worst}); every=100: "
            + ", ".join(
                f"k={agents[k]['k']} {res[k]['ratio']['median']:.2f}x"
                for k in agents
                if agents[k]["mode"] == "every100"
            )
        )
        dflt = [k for k in agents if agents[k]["mode"] == "default"]
        worst_d = max(dflt, key=lambda k: agents[k]["k"])
        print(
            f"default policy: the most events a load replays k={agents[worst_d]['k']}"
            f" ({agents[worst_d]['msgs']} msgs): {res[worst_d]['ratio']['median']:.2f}x; "
            + ", ".join(f"k={agents[k]['k']} {res[k]['ratio']['median']:.2f}x" for k in dflt)
        )
        payload.update(agents=agents, loads=res)
        if args.trials:
            url = sk_url(tmp / "cost.db", "FULL")
            # the fresh-process children read the peer's thread under the agent's name
            saver = lg_open(tmp / "lg.db", None)
            saver.conn.execute(
                "UPDATE checkpoints SET thread_id = ? WHERE thread_id = ?",
                (agents[worst]["agent"], worst),
            )
            saver.conn.commit()
            saver.conn.close()
            fresh = fresh_process(url, tmp / "lg.db", agents[worst]["agent"], args.trials)
            print(f"\n## fresh process: import + open + first load ({worst})\n")
            print(fresh_table(fresh))
            payload["fresh"] = fresh
        print(f"load average at end: {loadavg()}")
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--loads", type=int, default=None)
    parser.add_argument("--positions", type=int, default=None)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument(
        "--checksum", choices=("sha256", "blake3", "auto"), default=None, help="the stores'"
    )
    args = parser.parse_args(argv)
    CHECKSUM["checksum"] = args.checksum
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.loads = args.loads or (100 if args.quick else 300)
    args.positions = args.positions or (10 if args.quick else 12)
    args.trials = args.trials if args.trials is not None else (5 if args.quick else 11)
    payload = asyncio.run(amain(args))
    print(json.dumps(payload, sort_keys=True, default=str))
    return payload


if __name__ == "__main__":
    main()
