"""The codec pipeline: bytes on disk and the throughput cost of compression + encryption.

Workloads (the same as ``bench_checkpoint.py``; messages are plain dicts of ~200
characters):

1. **Bytes on disk** for one agent's 200-step growing chat (1 → 200 messages, one save
   per step) and for 40 agents x 31 saves (20 → 50 messages): statekeeper with each codec
   configuration vs LangGraph's ``SqliteSaver`` (db + WAL after
   ``wal_checkpoint(TRUNCATE)``). Target: statekeeper with compression and encryption
   <= 1/10 of SqliteSaver on the 200-step chat.
2. **Write throughput** on the core write benchmark (40 agents x 31 saves, sequential,
   ``durability="sync"``, ``synchronous=FULL``): plain codec vs zstd + AES-256-GCM, in
   rounds that alternate which goes first (medians). Target: <= 25% slower. The same
   with ``synchronous=OFF`` (no fsync: the codec's CPU cost is not hidden behind the
   disk) and ``durability="async"`` are shown for context, and cold/warm loads.
3. **Per-record cost** of encode and decode (one event of a 50-message chat step, one
   50-message snapshot) for each configuration, in microseconds.

Run::

    .venv/bin/python benchmarks/bench_codec.py            # ~1 min
    .venv/bin/python benchmarks/bench_codec.py --quick    # ~15 s

Results and analysis: ``docs/benchmarks.md`` (section "Codec").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import file_bytes, human_bytes, machine, median, table
from bench_checkpoint import (
    FIRST,
    LAST,
    Workload,
    lg_config,
    lg_open,
    lg_write_sequential,
    make_messages,
)
from statekeeper.codec import Codec
from statekeeper.security import Keyring
from statekeeper.store.store import StateStore

AGENTS = 40
LONG_STEPS = 200
KEYRING = Keyring({"bench": bytes(range(32))})

#: name -> StateStore options
CONFIGS: dict[str, dict[str, Any]] = {
    "plain (default)": {},
    "zstd": {"compression": "zstd"},
    "AES-GCM": {"keyring": KEYRING},
    "zstd + AES-GCM": {"compression": "zstd", "keyring": KEYRING},
    "zstd + AES-GCM + delta snapshots": {
        "compression": "zstd",
        "keyring": KEYRING,
        "full_snapshot_every": 8,
    },
    "msgpack + zstd + AES-GCM": {"format": "msgpack", "compression": "zstd", "keyring": KEYRING},
}
CODEC_OPTIONS = ("compression", "keyring", "format")


def url(path: Path, sync: str) -> str:
    return f"sqlite:///{path}?synchronous={sync}"


# ------------------------------------------------------------------------ disk


async def sk_long_chat(path: Path, options: dict[str, Any], snapshot_every: int = 100) -> int:
    msgs = make_messages(LONG_STEPS, seed=10_000)
    async with StateStore(url(path, "NORMAL"), snapshot_every=snapshot_every, **options) as s:
        for i in range(LONG_STEPS):
            await s.save("long", {"messages": msgs[: i + 1]})
    return file_bytes(path)


async def sk_workload(path: Path, options: dict[str, Any], wl: Workload) -> int:
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    async with StateStore(url(path, "NORMAL"), **options) as store:
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                await store.save(a, docs[a][step])
    return file_bytes(path)


def lg_long_chat(path: Path) -> int:
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    msgs = make_messages(LONG_STEPS, seed=10_000)
    saver = lg_open(path, "NORMAL")
    try:
        cfg, cp, version = lg_config("long"), empty_checkpoint(), None
        for step in range(LONG_STEPS):
            version = saver.get_next_version(version, None)
            cp = dict(cp)
            cp["channel_versions"] = {"messages": version}
            cp["versions_seen"] = {"agent": {"messages": version}}
            cp["channel_values"] = {"messages": msgs[: step + 1]}
            cp = create_checkpoint(cp, None, step)
            cfg = saver.put(
                cfg, cp, {"source": "loop", "step": step, "parents": {}}, {"messages": version}
            )
    finally:
        saver.conn.close()
    return file_bytes(path)


async def disk(tmp: Path, wl: Workload) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    out["SqliteSaver"] = {
        "long": lg_long_chat(tmp / "lg-long.db"),
        "workload": (
            lg_write_sequential(tmp / "lg-wl.db", "NORMAL", wl),
            file_bytes(tmp / "lg-wl.db"),
        )[1],
    }
    for n, (name, options) in enumerate(CONFIGS.items()):
        out[name] = {
            "long": await sk_long_chat(tmp / f"sk-long-{n}.db", options),
            "workload": await sk_workload(tmp / f"sk-wl-{n}.db", options, wl),
        }
    return out


# ------------------------------------------------------------------ throughput


async def write_rate(
    path: Path, sync: str, durability: str, options: dict[str, Any], wl: Workload
) -> float:
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    async with StateStore(url(path, sync), durability=durability, **options) as store:
        t0 = time.perf_counter()
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                await store.save(a, docs[a][step])
        await store.flush()
        return wl.saves / (time.perf_counter() - t0)


async def load_rate(
    path: Path, options: dict[str, Any], wl: Workload, passes: int, warm: bool
) -> float:
    async with StateStore(url(path, "FULL"), cache_size=1024 if warm else 0, **options) as store:
        if warm:
            for a in wl.agent_ids:
                await store.load(a)
        t0 = time.perf_counter()
        for _ in range(passes):
            for a in wl.agent_ids:
                await store.load(a)
        return passes * len(wl.agent_ids) / (time.perf_counter() - t0)


async def throughput(
    tmp: Path, wl: Workload, rounds: int, passes: int
) -> dict[str, dict[str, float]]:
    pair = {"plain": CONFIGS["plain (default)"], "zstd + AES-GCM": CONFIGS["zstd + AES-GCM"]}
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in pair}
    for r in range(rounds):
        order = list(pair.items()) if r % 2 == 0 else list(reversed(pair.items()))
        for name, options in order:
            res = runs[name]
            base = tmp / f"tp-{r}-{name.replace(' ', '')}"
            for label, sync, durability in (
                ("write FULL", "FULL", "sync"),
                ("write OFF", "OFF", "sync"),
                ("write async", "FULL", "async"),
            ):
                path = Path(f"{base}-{label.replace(' ', '')}.db")
                res.setdefault(label, []).append(
                    await write_rate(path, sync, durability, options, wl)
                )
            path = Path(f"{base}-writeFULL.db")
            res.setdefault("cold loads", []).append(
                await load_rate(path, options, wl, passes, False)
            )
            res.setdefault("warm loads", []).append(
                await load_rate(path, options, wl, passes * 10, True)
            )
    return {name: {k: median(v) for k, v in res.items()} for name, res in runs.items()}


# ------------------------------------------------------------------- per record


def _timed(codec: Codec, doc: Any, sealed: Any) -> tuple[Any, Any]:
    def encode() -> Any:
        return codec.encode("agent-001", 7, "patch", 1.5, doc)

    def decode() -> Any:
        return codec.decode("agent-001", 7, "patch", 1.5, sealed.payload, sealed.checksum)

    return encode, decode


def per_record() -> dict[str, dict[str, float]]:
    msgs = make_messages(50, seed=1)
    event = {"ops": [{"op": "add", "path": "/messages/-", "value": msgs[-1]}]}
    snapshot = {
        "fsm": None,
        "data": {"messages": msgs},
        "v": 1,
        "created_at": 1.0,
        "updated_at": 2.0,
        "entered": 0.0,
    }
    out: dict[str, dict[str, float]] = {}
    for name, options in CONFIGS.items():
        codec = Codec(**{k: v for k, v in options.items() if k in CODEC_OPTIONS})
        row: dict[str, float] = {}
        for label, doc in (("event", event), ("snapshot", snapshot)):
            sealed = codec.encode("agent-001", 7, "patch", 1.5, doc)
            n = 3000 if label == "event" else 500
            encode, decode = _timed(codec, doc, sealed)
            enc = min(timeit.repeat(encode, number=n, repeat=5)) / n
            dec = min(timeit.repeat(decode, number=n, repeat=5)) / n
            row[f"{label} encode us"] = enc * 1e6
            row[f"{label} decode us"] = dec * 1e6
            row[f"{label} bytes"] = len(sealed.payload) + len(sealed.checksum)
        out[name] = row
    return out


# ------------------------------------------------------------------------ main


def report(
    d: dict[str, dict[str, int]],
    tp: dict[str, dict[str, float]],
    pr: dict[str, dict[str, float]],
    rounds: int,
) -> None:
    lg = d["SqliteSaver"]
    rows = [
        [
            "LangGraph SqliteSaver",
            human_bytes(lg["long"]),
            "1.0x",
            human_bytes(lg["workload"]),
            "1.0x",
        ]
    ]
    for name in CONFIGS:
        s = d[name]
        rows.append(
            [
                f"statekeeper, {name}",
                human_bytes(s["long"]),
                f"1/{lg['long'] / s['long']:.0f}",
                human_bytes(s["workload"]),
                f"1/{lg['workload'] / s['workload']:.0f}",
            ]
        )
    print("\n### bytes on disk (db + WAL after wal_checkpoint(TRUNCATE))\n")
    print(
        table(
            [
                "store",
                f"1 agent x {LONG_STEPS} saves (1->{LONG_STEPS} msgs)",
                "vs SqliteSaver",
                f"{AGENTS} agents x {LAST - FIRST + 1} saves ({FIRST}->{LAST} msgs)",
                "vs SqliteSaver",
            ],
            rows,
        )
    )
    target = lg["long"] / d["zstd + AES-GCM"]["long"]
    print(
        f"\ntarget: zstd + AES-GCM <= 1/10 of SqliteSaver on the {LONG_STEPS}-step chat: "
        f"1/{target:.0f} ({'MET' if target >= 10 else 'MISSED'})"
    )
    print(f"\n### throughput, plain vs zstd + AES-GCM ({rounds} rounds, medians, ops/s)\n")
    rows = []
    for metric in tp["plain"]:
        a, b = tp["plain"][metric], tp["zstd + AES-GCM"][metric]
        rows.append([metric, f"{a:,.0f}", f"{b:,.0f}", f"{(b / a - 1) * 100:+.1f}%"])
    print(table(["metric", "plain", "zstd + AES-GCM", "cost"], rows))
    cost = 1 - tp["zstd + AES-GCM"]["write FULL"] / tp["plain"]["write FULL"]
    print(
        f"\ntarget: write cost <= 25% on the core write benchmark (FULL): {cost * 100:.1f}% "
        f"({'MET' if cost <= 0.25 else 'MISSED'})"
    )
    print("\n### per record (microseconds; best of 5)\n")
    keys = [
        "event encode us",
        "event decode us",
        "event bytes",
        "snapshot encode us",
        "snapshot decode us",
        "snapshot bytes",
    ]
    rows = [
        [name, *(f"{pr[name][k]:.1f}" if "us" in k else f"{pr[name][k]:,.0f}" for k in keys)]
        for name in CONFIGS
    ]
    print(table(["codec", *keys], rows))


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    wl = Workload(AGENTS, FIRST, LAST)
    with tempfile.TemporaryDirectory(prefix="sk-codec-") as tmpdir:
        tmp = Path(tmpdir)
        print(
            "machine:",
            json.dumps(
                machine("langgraph-checkpoint-sqlite", "zstandard", "cryptography", "msgpack")
            ),
        )
        t0 = time.perf_counter()
        d = await disk(tmp, wl)
        pr = per_record()
        tp = await throughput(tmp, wl, args.rounds, args.passes)
        report(d, tp, pr, args.rounds)
        print(f"({time.perf_counter() - t0:.0f} s)")
    result = {
        "bench": "codec",
        "disk": d,
        "throughput": tp,
        "per_record": pr,
        "rounds": args.rounds,
    }
    print(json.dumps(result, sort_keys=True))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, fewer loads")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 5)")
    parser.add_argument("--passes", type=int, default=None, help="cold-load passes per round")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.passes is None:
        args.passes = 2 if args.quick else 5
    return asyncio.run(amain(args))


if __name__ == "__main__":
    main()
