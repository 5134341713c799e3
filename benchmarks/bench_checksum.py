"""The record checksum's cost by record size: SHA-256 against BLAKE3 (issue 11).

Each figure is a record's link as the codec computes it (``Codec.seal`` of a body of
that many bytes, no key, not compressed: the hash over identity, header, prev and
body), best of ``--repeat`` runs of ``--number`` seals in the thread's CPU time, and the hash alone
(``hashlib.sha256`` / ``blake3.blake3`` of the same bytes). The sizes: a chat event
(~450 B), the ``"auto"`` threshold (4 KiB), the snapshots of ``bench_coldload`` (~32 KB)
and a larger state.

Run::

    .venv/bin/python benchmarks/bench_checksum.py
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
import timeit
from typing import Any

import blake3

from statekeeper.codec import Codec

SIZES = (200, 450, 1024, 2048, 4096, 8192, 32 * 1024, 128 * 1024)


def best(fn: Any, number: int, repeat: int) -> float:
    """Microseconds per call, the best of ``repeat`` runs."""
    runs = timeit.repeat(fn, number=number, repeat=repeat, timer=time.thread_time)
    return min(runs) / number * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    codecs = {name: Codec(checksum=name) for name in ("sha256", "blake3")}
    print(f"load average: {os.getloadavg()}")
    print(
        "| body bytes | sha256 µs | blake3 µs | blake3 / sha256 | seal sha256 µs | seal blake3 µs |"
    )
    print("|---|---|---|---|---|---|")
    for size in SIZES:
        data = os.urandom(size)
        body = b'"' + b"x" * (size - 2) + b'"'
        sha = best(lambda d=data: hashlib.sha256(d).digest(), args.number, args.repeat)
        b3 = best(lambda d=data: blake3.blake3(d).digest(), args.number, args.repeat)
        seals = {
            name: best(
                lambda c=codec, b=body: c.seal("agent-1", 100, "snapshot", 1.5, b),
                args.number,
                args.repeat,
            )
            for name, codec in codecs.items()
        }
        print(
            f"| {size:,} | {sha:.2f} | {b3:.2f} | {b3 / sha:.2f}x "
            f"| {seals['sha256']:.2f} | {seals['blake3']:.2f} |"
        )


if __name__ == "__main__":
    main()
