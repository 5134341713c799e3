"""S3 requests per ``delete_agent`` / ``delete_agent_at`` (and per append, unchanged):
what the delete's claim (one conditional PUT, one more HEAD) costs. Request counts are
load-independent; wall time on a local moto server is printed too (noisy).

Starts its own moto server on a free loopback port (``pip install 'moto[server]'``).
A/B: run it with ``PYTHONPATH=<other tree>/src`` and without."""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper.backends.s3 import S3Backend
from statekeeper.testing._contract import request


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"moto server did not start on {url}")


async def measure(backend: Any, calls: collections.Counter[str], n: int, what: str) -> None:
    ids = [f"b{i}" for i in range(n)]
    calls.clear()
    for agent_id in ids:
        await backend.append(request(agent_id, 0, 2))
    print(f"append (2 events)\t{sum(calls.values()) / n:.2f} requests\t{dict(calls)}")
    calls.clear()
    started = time.perf_counter()
    for agent_id in ids:
        if what == "delete_agent_at":
            await backend.delete_agent_at(agent_id, 2)
        else:
            await backend.delete_agent(agent_id)
    took = (time.perf_counter() - started) / n * 1e6
    per = sum(calls.values()) / n
    print(f"{what}\t{per:.2f} requests\t{took:.0f} us\t{dict(sorted(calls.items()))}")


async def main(n: int) -> None:
    proc, url = start_moto()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    try:
        backend = S3Backend(
            f"skbench-{uuid.uuid4().hex[:8]}",
            "agents",
            endpoint_url=url,
            region_name="us-east-1",
            create_bucket=True,
        )
        calls: collections.Counter[str] = collections.Counter()

        def count(event_name: str, **_: Any) -> None:
            calls[event_name.rsplit(".", 1)[-1]] += 1

        backend._s3.meta.events.register("before-call.s3", count)
        await backend.append(request("warm", 0, 1))  # the bucket exists
        for what in ("delete_agent", "delete_agent_at"):
            await measure(backend, calls, n, what)
        await backend.drop_all(delete_bucket=True)
        await backend.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100, help="agents deleted per measure")
    asyncio.run(main(parser.parse_args().n))
