"""``S3Backend.list_agents`` over a whole store: requests and wall time, two trees A/B.

Starts its own moto server on a free loopback port (``pip install 'moto[server]'``),
fills one bucket with ``--agents`` agents (two appends each, one with an idempotency
key: four objects per agent), then lists every agent (pages of ``--page``) with each
tree in its own process, alternately, ``--rounds`` times. The listing process imports
the tree given by ``PYTHONPATH`` (``--base``/``--tree``: their ``src`` folders)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper.backends.s3 import S3Backend
from statekeeper.testing._contract import request

HERE = os.path.dirname(os.path.abspath(__file__))


def _backend(endpoint: str, bucket: str, create: bool = False) -> S3Backend:
    return S3Backend(
        bucket, "agents", endpoint_url=endpoint, region_name="us-east-1", create_bucket=create
    )


async def fill(endpoint: str, bucket: str, n: int) -> None:
    backend = _backend(endpoint, bucket, create=True)
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            agent_id = f"agent-{i:06d}"
            await backend.append(request(agent_id, 0, 2, key="k"))
            await backend.append(request(agent_id, 2, 1))

    await asyncio.gather(*(one(i) for i in range(n)))
    await backend.close()


async def list_all(endpoint: str, bucket: str, page: int) -> dict[str, Any]:
    backend = _backend(endpoint, bucket)
    calls: collections.Counter[str] = collections.Counter()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    await backend.head("warm-up")  # (the bucket check: not part of the listing)
    backend._s3.meta.events.register("before-call.s3", count)
    started = time.perf_counter()
    listed = 0
    after: str | None = None
    while batch := await backend.list_agents(after=after, limit=page):
        listed += len(batch)
        after = batch[-1].agent_id
    took = time.perf_counter() - started
    await backend.close()
    return {"agents": listed, "seconds": took, "requests": dict(calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", help="src folder of the base tree")
    parser.add_argument("--tree", help="src folder of the tree measured")
    parser.add_argument("--agents", type=int, default=2504)
    parser.add_argument("--page", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--list", nargs=2, metavar=("ENDPOINT", "BUCKET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    if args.list:
        print(json.dumps(asyncio.run(list_all(*args.list, args.page))))
        return
    sys.path.insert(0, HERE)
    from bench_s3_delete_requests import start_moto

    proc, endpoint = start_moto()
    bucket = f"skbench-{uuid.uuid4().hex[:8]}"
    try:
        started = time.perf_counter()
        asyncio.run(fill(endpoint, bucket, args.agents))
        print(f"filled {args.agents} agents in {time.perf_counter() - started:.1f} s")
        print(f"load average at start: {os.getloadavg()}")
        sides = [("base", args.base), ("tree", args.tree)]
        for r in range(1, args.rounds + 1):
            for name, src in sides:
                env = {**os.environ, "PYTHONPATH": os.path.abspath(src)} if src else os.environ
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--page",
                        str(args.page),
                        "--list",
                        endpoint,
                        bucket,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                print(f"round {r}\t{name}\t{out.stdout.strip()}", flush=True)
        print(f"load average at end: {os.getloadavg()}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
