"""Where a replayed event's time goes in a cold load (issue 11, item 3).

A chat of ~300-character messages, one appended per save, ``snapshot_every=100``: the
agent ``k0`` at a snapshot (100 saves) and ``k99`` 99 events past it (199 saves), on
SQLite. Per replayed event (the ``k99`` figure minus the ``k0`` one, / 99, or the part
alone over the 99 rows), best of ``--repeat`` runs of ``--number`` calls, in CPU time
of the one thread that does it all (``time.thread_time``: a loaded machine's waits are
not counted):

* ``load``: ``StateStore(cache_size=0).load`` (everything);
* ``read``: ``read_state_rows`` (the one statement: the 99 more rows, their tuples);
* ``verify+parse``: ``Codec.decode_chain(..., appends=True)`` of the 99 rows (the
  hash of each, the chain check, the parse of each appended value);
* ``hash``: the hash of each row's link input alone (SHA-256, the algorithm of these
  small records under ``checksum="auto"``);
* ``parse``: ``orjson.loads`` of each row's appended value alone;
* ``apply``: ``apply_payloads`` of the decoded values onto a copy of the snapshot's
  state.

Run::

    .venv/bin/python benchmarks/bench_replay_parts.py
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import os
import struct
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from statekeeper import StateStore
from statekeeper.store.state import apply_payloads


def best(fn: Any, number: int, repeat: int) -> float:
    """Microseconds per call, the best of ``repeat`` runs."""
    runs = timeit.repeat(fn, number=number, repeat=repeat, timer=time.thread_time)
    return min(runs) / number * 1e6


async def amain(args: argparse.Namespace) -> None:
    msgs = make_messages(200, seed=7, chars=300)
    with tempfile.TemporaryDirectory(prefix="sk-replay-") as d:
        url = f"sqlite:///{d}/r.db"
        async with StateStore(url, snapshot_every=100, witness=False) as store:
            for agent, saves in (("k0", 100), ("k99", 199)):
                for i in range(saves):
                    await store.save(agent, {"messages": msgs[: i + 1]})
        store = StateStore(url, cache_size=0, witness=False)
        await store.load("k0")
        backend, codec, reads = store.backend, store.codec, store._reads

        async def abest(fn: Any) -> float:
            runs = []
            for _ in range(args.repeat):
                t0 = time.thread_time()
                for _ in range(args.number):
                    await fn()
                runs.append(time.thread_time() - t0)
            return min(runs) / args.number * 1e6

        times: dict[str, tuple[float, float]] = {}
        for agent in ("k0", "k99"):
            load = await abest(lambda a=agent: store.load(a))
            read = await abest(lambda a=agent: backend.read_state_rows(a))
            times[agent] = (load, read)
        await store.load("k99")
        _, _, snap, rows = await backend.read_state_rows("k99")
        assert snap is not None and len(rows) == 99
        # (not at_snapshot: without a head tag or events it answers None)
        base = await reads.decode_snapshot("k99", snap)
        n = len(rows)
        decode = best(
            lambda: codec.decode_chain("k99", rows, base.link, appends=True), 20, args.repeat
        )
        ident = [
            b"sk-link/1"
            + struct.pack(">I", 3)
            + b"k99"
            + struct.pack(">I", len(r[1]))
            + r[1].encode()
            + struct.pack(">qd", r[0], r[2])
            for r in rows
        ]

        def hashes() -> None:
            sha, join = hashlib.sha256, b"".join
            for i, r in zip(ident, rows, strict=True):
                sha(join((i, r[3]))).digest()

        values = [r[3][r[3].find(b'"value":') + 8 : -3] for r in rows]

        def parses() -> None:
            loads = orjson.loads
            for v in values:
                loads(v)

        docs, _, _, error = codec.decode_chain("k99", rows, base.link, appends=True)
        assert error is None
        data = base.data

        def applies() -> None:
            base.data = copy.copy(data)
            base.data["messages"] = list(data["messages"])
            base.seq = snap.seq
            apply_payloads(base, rows, docs)

        copying = best(lambda: (copy.copy(data), list(data["messages"])), args.number, args.repeat)
        hash_t = best(hashes, 20, args.repeat)
        parse_t = best(parses, 20, args.repeat)
        apply_t = best(applies, 20, args.repeat) - copying
        await store.close()
    (l0, r0), (l99, r99) = times["k0"], times["k99"]
    print(f"load average: {os.getloadavg()}")
    print("| part | k=0 µs | k=99 µs | per replayed event µs |")
    print("|---|---|---|---|")
    print(f"| load | {l0:.1f} | {l99:.1f} | {(l99 - l0) / n:.2f} |")
    print(f"| read (read_state_rows) | {r0:.1f} | {r99:.1f} | {(r99 - r0) / n:.2f} |")
    print(f"| verify+parse (decode_chain) | | {decode:.1f} | {decode / n:.2f} |")
    print(f"| of which hash alone | | {hash_t:.1f} | {hash_t / n:.2f} |")
    print(f"| of which parse alone | | {parse_t:.1f} | {parse_t / n:.2f} |")
    print(f"| apply (apply_payloads) | | {apply_t:.1f} | {apply_t / n:.2f} |")
    rest = (l99 - l0) - (r99 - r0) - decode - apply_t
    print(f"| rest (load − read − decode − apply) | | | {rest / n:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
