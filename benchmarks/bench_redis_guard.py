"""What the Redis store-identity check (lane "redisflush") costs a save and a load.

Every script now takes the shard's marker key and token and ``GET``s it first
(``lua/guard.lua``); the plain reads pipeline a ``GET`` after their command. This
measures, on a private ``redis-server`` (no persistence, a free loopback port), for a
side's tree (``--base`` and ``--tree`` ``src`` directories, run alternately):

- the ``INFO commandstats`` calls per operation, by command: ``evalsha`` (and the
  plain reads) are what the client sends, the rest what the scripts call (Redis 7
  counts those too, also in ``total_commands_processed``, shown as ``processed``);
- the client's instructions per operation, counted by callgrind only around the
  operations (``callgrind_window.py``).

``--cpu`` measures the client's CPU time per operation instead (no valgrind; rounds
alternate the sides). Operations: ``save`` (``StateStore.save`` of a cached agent: one
append script), ``load`` (``StateStore.load`` of a cached agent: the read script that
validates the cache), ``create`` (``StateStore.save`` of a new agent: the append script
takes the path where the hash holds no head, where lane "redisevict" checks the agent
index, ``lua/presence.lua``), ``feed`` (``read_feed`` of a page of 20 entries: lane
"redisguard" reads the feed's counter before the entries, to find lost ones). Run::

    .venv/bin/python benchmarks/bench_redis_guard.py run /tmp/rg --base /work/main/src --tree src
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind_window import run_window

AGENTS = 4
WARM = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stats(url: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(url.split("?", 1)[0])
    try:
        out = {"processed": int(client.info("stats")["total_commands_processed"])}
        for name, row in client.info("commandstats").items():
            out[name.removeprefix("cmdstat_")] = int(row["calls"])
        return out
    finally:
        client.close()


def child(url: str, op: str, n: int, lib: str | None, out: str) -> None:
    from statekeeper import StateStore

    start, stop = (lambda: None), (lambda: None)
    if lib not in (None, "None"):
        cg = ctypes.CDLL(lib)
        start, stop = cg.cg_start, cg.cg_stop
    agents = [f"agent-{k}" for k in range(AGENTS)]
    body = "x" * 300

    async def main() -> dict[str, int]:
        async with StateStore(url) as store:
            for i in range(WARM):
                for a in agents:
                    await store.save(a, {"i": i, "msg": body})
                    await store.load(a)
            before = _stats(url)
            start()
            cpu = time.process_time()
            for i in range(n):
                a = agents[i % AGENTS]
                if op == "save":
                    await store.save(a, {"i": WARM + i, "msg": body})
                elif op == "create":  # a new agent: the presence check's path
                    await store.save(f"new-{i}", {"i": i, "msg": body})
                elif op == "feed":  # a page of the change feed (lane "redisguard")
                    await store.backend.read_feed(i % 100, 20)
                else:
                    await store.load(a)
            cpu = time.process_time() - cpu
            stop()
            after = _stats(url)
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            delta["cpu_ns"] = round(cpu * 1e9)
            return delta

    delta = asyncio.run(main())
    delta["processed"] -= 2  # the two INFO calls of the "before" read
    delta["info"] = delta.get("info", 0) - 2
    Path(out).write_text(json.dumps(delta))


def run(out: Path, base: str, tree: str, n: int, rounds: int, cpu: bool) -> None:
    exe = shutil.which("redis-server")
    assert exe is not None, "needs redis-server"
    port = _free_port()
    data = tempfile.mkdtemp(prefix="rg-redis-")
    server = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            data,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        rows: dict[tuple[str, str], list[int]] = {}
        cmds: dict[tuple[str, str], dict[str, Any]] = {}
        for r in range(rounds):
            for side, src in (("base", base), ("tree", tree)):
                for op in ("save", "load", "create", "feed"):
                    url = f"redis://127.0.0.1:{port}/0?prefix=rg{r}{side}{op}:"
                    stats = out / f"{side}-{op}.json"
                    os.environ["PYTHONPATH"] = src
                    if cpu:  # no valgrind: CPU-seconds of the client, alternated sides
                        subprocess.run(
                            [
                                sys.executable,
                                __file__,
                                "child",
                                url,
                                op,
                                str(n),
                                "None",
                                str(stats),
                            ],
                            check=True,
                        )
                        count = json.loads(stats.read_text())["cpu_ns"]
                    else:
                        count = run_window(
                            __file__,
                            ["child", url, op, str(n), str(out / "cgwindow.so"), str(stats)],
                            out,
                            f"{side}-{op}",
                        )
                    rows.setdefault((side, op), []).append(count // n)
                    cmds[(side, op)] = json.loads(stats.read_text())
                    cmds[(side, op)].pop("cpu_ns")
        for (side, op), counts in sorted(rows.items()):
            c = cmds[(side, op)]
            per = {k: round(v / n, 2) for k, v in sorted(c.items()) if v}
            unit = "CPU ns/op" if cpu else "instructions/op"
            print(f"{op:5} {side:5} {unit} {sorted(counts)}  per op: {per}")
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--base", required=True)
    r.add_argument("--tree", required=True)
    r.add_argument("--ops", type=int, default=400)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--cpu", action="store_true", help="CPU-seconds, no valgrind")
    c = sub.add_parser("child")
    c.add_argument("url")
    c.add_argument("op")
    c.add_argument("n", type=int)
    c.add_argument("lib")
    c.add_argument("out")
    args = parser.parse_args()
    if args.cmd == "run":
        base, tree = os.path.abspath(args.base), os.path.abspath(args.tree)
        run(args.out, base, tree, args.ops, args.rounds, args.cpu)
    else:
        child(args.url, args.op, args.n, args.lib, args.out)


if __name__ == "__main__":
    main()
