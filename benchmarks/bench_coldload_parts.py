"""Where a cold load at a whole snapshot (k=0) goes on the hardware, part by part, and
what the snapshot's BLAKE3 costs by length (docs/benchmarks.md, "coldload2").

Reads the files ``bench_coldtail_window.py build <dir> 100`` wrote (``p.db``: agent
``k0`` is 100 saves of the chat, its head at the whole snapshot at 100; ``lg.db``: the
peer's), CPU per call by ``time.thread_time`` (best of ``--rounds`` rounds of ``--n``):

- ``load``: ``StateStore.load`` (``cache_size=0``), and ``SqliteSaver.get_tuple``;
- ``statement``: the cold-load statement alone (``state_rows_now``);
- ``at_snapshot``: the rows to the record (hash, parse, record, head check);
- ``blake3``: the snapshot's link input as the codec hashes it (one buffer);
- ``unpackb``: the snapshot body's parse;
- ``2nd statement`` (an agent whose latest snapshot is a tail, ``--agent k8``): the read
  of its whole snapshot and its base (``snapshots_at_now``);
- BLAKE3 of random inputs of the lengths given (``--sizes``): blake3-py hashes through
  the incremental hasher, which takes a buffer in power-of-two subtrees of whole
  chunks, so a length just below a power of two of KiB goes through the narrower SIMD
  paths in several passes.

Run::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldtail_window.py build /tmp/w 100
    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldload_parts.py /tmp/w
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import ormsgpack
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open
from statekeeper import StateStore
from statekeeper.codec.pipeline import _names, _seq_ts
from statekeeper.store.body import SNAPSHOT_TYPE


def best(fn: Callable[[], Any], n: int, rounds: int) -> float:
    """Best CPU µs per call of ``fn`` over ``rounds`` rounds of ``n`` calls."""
    out = []
    for _ in range(rounds):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        out.append((time.thread_time() - t0) / n * 1e6)
    return min(out)


async def parts(out: Path, agent: str, n: int, rounds: int) -> dict[str, float]:
    got: dict[str, float] = {}
    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    saver = lg_open(out / "lg.db", None)
    try:
        await store.load(agent)

        def load() -> None:  # (the coroutine stepped by hand: no event-loop pass)
            coro = store.load(agent)
            try:
                coro.send(None)
            except StopIteration:
                return
            raise RuntimeError("the load awaited something")

        cfg = lg_config(agent)
        got["load"] = best(load, n, rounds)
        got["get_tuple"] = best(lambda: saver.get_tuple(cfg), n, rounds)
        backend, reads = store.backend, store._reads
        rows = backend.state_rows_now(agent)  # type: ignore[attr-defined]
        got["statement"] = best(lambda: backend.state_rows_now(agent), n, rounds)  # type: ignore[attr-defined]
        got["at_snapshot"] = best(lambda: reads.at_snapshot(agent, *rows), n, rounds)
        snap = rows[2]
        prefix = (
            b"sk-link/1" + _names(agent, SNAPSHOT_TYPE) + _seq_ts.pack(snap.seq, snap.timestamp)
        )
        payload = snap.payload
        got["blake3"] = best(lambda: blake3.blake3(b"".join((prefix, payload))).digest(), n, rounds)
        got["xxh3_128"] = best(lambda: xxhash.xxh3_128_digest(payload), n, rounds)
        view = memoryview(payload)[35:]
        got["unpackb"] = best(lambda: ormsgpack.unpackb(view), n, rounds)
        got["link input bytes"] = float(len(prefix) + len(payload))
        body = ormsgpack.unpackb(view)
        if "w" in body:  # a tail: the second statement (its whole snapshot and base)
            w, base = body["w"], body["base"]
            at = backend.snapshots_at_now  # type: ignore[attr-defined]
            got["2nd statement"] = best(lambda: at(agent, w, base), n, rounds)
    finally:
        await store.close()
        saver.conn.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--agent", default="k0")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--sizes", type=int, nargs="*", default=[16384, 31744, 32607, 32768, 36864, 49152, 65536]
    )
    args = ap.parse_args()
    for name, us in asyncio.run(parts(args.dir, args.agent, args.n, args.rounds)).items():
        print(f"{name:18} {us:10.2f}")
    for size in args.sizes:
        data = os.urandom(size)
        us = best(lambda: blake3.blake3(data).digest(), args.n, args.rounds)  # noqa: B023
        print(f"blake3 {size:>11} {us:10.2f} us")


if __name__ == "__main__":
    main()
