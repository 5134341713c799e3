"""The sync face's cost over the async API and LangGraph's ``SqliteSaver`` (issue 11:
"no thread hop when the writer is idle"), two source trees side by side.

``SyncStateStore`` ran every call on a private loop thread (``Portal``): each call
crossed to that thread and back. It now runs the call on the calling thread
(``store/shared_loop.py``, as the LangGraph saver does). Each round runs one child
process per tree (``--tree``, alternating which goes first) and each child measures,
interleaved per operation:

* ``load k=0`` / ``load k=8``: a cold load (``cache_size=0``) of an agent whose head sits
  k events past its whole snapshot (100 + k saves of a chat of 300-character
  messages), through the sync face, the async API (timed inside one coroutine) and
  ``SqliteSaver.get_tuple``: wall and process CPU (every thread) per load;
* ``save FULL``: sequential durable saves of one growing chat (SQLite WAL,
  synchronous=FULL), sync face vs async vs ``SqliteSaver.put``;
* ``16 threads group``: 16 threads saving their own agent through one
  ``SyncStateStore(durability="group")``: saves/s and CPU per save.

    python benchmarks/bench_sync_face.py --base-ref c0641938 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOADS = 300
SAVES = 150
GROUP_THREADS = 16
GROUP_SAVES = 40  # per thread


def _timed(fn: Any, wall: list[float], cpu: list[float]) -> Any:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
    return out


def child(data: Path, out: dict[str, Any]) -> None:
    """(In a child process, its tree first on sys.path.) Measure one round."""
    sys.path.insert(0, str(HERE))
    from _common import lg_config, lg_open, lg_plan, make_messages
    from bench_checkpoint import sk_url
    from statekeeper import SyncStateStore
    from statekeeper.store.store import StateStore

    url = sk_url(data / "load-sk.db", "FULL")
    saver = lg_open(data / "load-lg.db", "FULL")
    store = SyncStateStore(url, cache_size=0)
    loop = asyncio.new_event_loop()
    astore = loop.run_until_complete(_make(StateStore, url))
    for k in (0, 8):
        agent, cfg = f"k{k}", lg_config(f"k{k}")
        r: dict[str, list[float]] = {n: [] for n in ("sync", "sync_cpu", "lg", "lg_cpu")}
        store.load(agent), saver.get_tuple(cfg)  # (first touch: untimed)
        for i in range(LOADS):
            for side in ("sync", "lg") if i % 2 == 0 else ("lg", "sync"):
                if side == "sync":
                    _timed(lambda a=agent: store.load(a), r["sync"], r["sync_cpu"])
                else:
                    _timed(lambda c=cfg: saver.get_tuple(c), r["lg"], r["lg_cpu"])
        r["async"], r["async_cpu"] = loop.run_until_complete(
            _async_ops([lambda a=agent: astore.load(a)] * LOADS)
        )
        out[f"load k={k}"] = r
    store.close()
    loop.run_until_complete(astore.close())
    saver.conn.close()
    # sequential durable saves, synchronous=FULL
    msgs = make_messages(SAVES, seed=3, chars=300)
    docs = [{"messages": msgs[: i + 1]} for i in range(SAVES)]
    tmp = Path(tempfile.mkdtemp(dir=data))
    store = SyncStateStore(sk_url(tmp / "s.db", "FULL"), durability="sync")
    astore = loop.run_until_complete(_make(StateStore, sk_url(tmp / "a.db", "FULL")))
    saver = lg_open(tmp / "lg.db", "FULL")
    plan, cfg = lg_plan(saver, docs), lg_config("t")
    r = {n: [] for n in ("sync", "sync_cpu", "lg", "lg_cpu", "async", "async_cpu")}
    blocks = 5
    per = SAVES // blocks
    for b in range(blocks):  # blocks of each side in turn: the three grow alike
        part = range(b * per, (b + 1) * per)
        for i in part:
            _timed(lambda i=i: store.save("t", docs[i]), r["sync"], r["sync_cpu"])
        for i in part:
            cfg = _timed(lambda c=cfg, p=plan[i]: saver.put(c, *p), r["lg"], r["lg_cpu"])
        w, c = loop.run_until_complete(
            _async_ops([lambda i=i: astore.save("t", docs[i]) for i in part])
        )
        r["async"] += w
        r["async_cpu"] += c
    out["save FULL"] = r
    store.close()
    loop.run_until_complete(astore.close())
    saver.conn.close()
    loop.close()
    # 16 threads, one store, group durability
    store = SyncStateStore(sk_url(tmp / "g.db", "FULL"), durability="group")
    start = threading.Barrier(GROUP_THREADS + 1)

    def work(n: int) -> None:
        start.wait()
        for i in range(GROUP_SAVES):
            store.save(f"g{n}", docs[i])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(GROUP_THREADS)]
    for t in threads:
        t.start()
    c0, t0 = time.process_time(), time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    n = GROUP_THREADS * GROUP_SAVES
    out["group16"] = {"saves_s": n / wall, "cpu_per_save": cpu / n}
    shutil.rmtree(tmp, ignore_errors=True)


async def _make(cls: Any, url: str) -> Any:
    return cls(url, cache_size=0) if "load-sk" in url else cls(url, durability="sync")


async def _async_ops(ops: list[Any]) -> tuple[list[float], list[float]]:
    wall: list[float] = []
    cpu: list[float] = []
    for op in ops:
        c0, t0 = time.process_time(), time.perf_counter()
        await op()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def _base_tree(ref: str) -> Path:
    """This tree's src (compiled extensions included) with ``ref``'s Python files."""
    base = Path(tempfile.mkdtemp(prefix="sk-base-"))
    shutil.copytree(ROOT / "src", base / "src")
    for py in (base / "src").rglob("*.py"):
        py.unlink()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    return base / "src"


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per measure: the median over rounds of each round's median, with [min..max]."""

    def spread(vals: list[float]) -> list[float]:
        return [statistics.median(vals), min(vals), max(vals)]

    out: dict[str, Any] = {}
    for op in rounds[0]:
        if op == "group16":
            out[op] = {m: spread([r[op][m] for r in rounds]) for m in rounds[0][op]}
        else:
            out[op] = {
                m: spread([statistics.median(r[op][m]) * 1e6 for r in rounds])
                for m in rounds[0][op]
            }
    return out


def _cell(v: list[float], fmt: str = ",.0f") -> str:
    return f"{v[0]:{fmt}} [{v[1]:{fmt}}..{v[2]:{fmt}}]"


def report(summary: dict[str, Any]) -> str:
    """A Markdown table: µs per operation (median of round medians [min..max])."""
    rows = []
    for tree, ops in summary.items():
        for op, m in ops.items():
            if op == "group16":
                rows.append(
                    f"| {tree} | 16 threads, group | {_cell(m['saves_s'])} saves/s | "
                    f"{_cell([x * 1e6 for x in m['cpu_per_save']])} µs CPU/save | | |"
                )
                continue
            rows.append(
                f"| {tree} | {op} | {_cell(m['sync'])} / {_cell(m['sync_cpu'])} | "
                f"{_cell(m['async'])} / {_cell(m['async_cpu'])} | "
                f"{_cell(m['lg'])} / {_cell(m['lg_cpu'])} | "
                f"{m['lg'][0] / m['sync'][0]:.2f}x |"
            )
    head = (
        "| tree | operation | sync face wall / CPU µs | async wall / CPU µs | "
        "SqliteSaver wall / CPU µs | peer/sync (wall) |\n|---|---|---|---|---|---|"
    )
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base-ref", default=None, help="git ref of the 'before' tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        res: dict[str, Any] = {}
        child(Path(args.child), res)
        print(json.dumps(res))
        return
    sys.path.insert(0, str(HERE))
    from bench_hotpath import build_loads

    data = Path(tempfile.mkdtemp(prefix="sk-syncface-"))
    asyncio.run(build_loads(data))
    trees = {"after": ROOT / "src"}
    if args.base_ref:
        trees = {"before": _base_tree(args.base_ref), **trees}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(data)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name} done", file=sys.stderr, flush=True)
    summary = {name: _summary(rs) for name, rs in rounds.items()}
    print(json.dumps(summary, indent=1))
    print(report(summary))
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
