"""The tiered save path and its mirror (h/tierinc): tier calls counted per append, and
the CPU of the appends themselves, for an append with a known head tag (a store's) and
one without (``check_tag`` False: a raw caller, a restore's pieces, a store whose cached
tag is not known), onto its own hot copy and onto an earlier incarnation's; and a hot
read (a hit). SQLite durable tier, SQLite hot tier, in temporary files.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_tiered_unchecked_mirror.py calls
    PYTHONPATH=src .venv/bin/python benchmarks/bench_tiered_unchecked_mirror.py cpu --kind tagged

``calls`` prints the counts (deterministic). ``cpu --kind tagged|unchecked`` makes
``--n`` appends of that kind through one tiered backend and prints the thread CPU time
per append: run it under ``valgrind --tool=callgrind`` for instruction counts, with
``PYTHONPATH`` at this tree and at the tree before (the same script: it uses only what
both have), ``--tiers memory`` (pure Python: the counts repeat; SQLite's writer threads
wait by the clock) and two ``--n``: the difference over the appends made between them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from statekeeper.backends.base import Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.records import AppendRequest
from statekeeper.testing import request as appended

COUNTED = ("head_tag", "head", "read", "append", "append_batch", "delete_agent", "rewrite")


def _count(tier: Backend, counts: collections.Counter[str], prefix: str) -> None:
    for name in COUNTED:
        real = getattr(tier, name)

        def counted(real: Any = real, name: str = name) -> Any:
            async def call(*args: Any, **kw: Any) -> Any:
                counts[prefix + name] += 1
                return await real(*args, **kw)

            return call

        setattr(tier, name, counted())


def _tiered(where: Path, tiers: str = "sqlite") -> TieredBackend:
    if tiers == "memory":  # (pure Python, no threads: instruction counts repeat)
        return TieredBackend(MemoryBackend(), hot=MemoryBackend(), hot_timeout=60)
    return TieredBackend(
        SQLiteBackend(where / "d.db"), hot=SQLiteBackend(where / "h.db"), hot_timeout=60
    )


def _next(seq: int, checked: bool) -> AppendRequest:
    request = dataclasses.replace(appended("a", seq, 1), head_tag=b"t-%d" % (seq + 1))
    if checked:
        return dataclasses.replace(request, expected_tag=b"t-%d" % seq, check_tag=True)
    return request


async def calls() -> None:
    where = Path(tempfile.mkdtemp())
    store = _tiered(where)
    await store.initialize()
    await store.append(dataclasses.replace(appended("a", 0, 1), head_tag=b"t-1"))
    counts: collections.Counter[str] = collections.Counter()
    assert store.hot is not None
    _count(store.durable, counts, "durable.")
    _count(store.hot, counts, "hot.")
    rows: list[tuple[str, dict[str, int]]] = []
    seq = 1
    for name, checked in (("tagged append", True), ("unchecked append, own copy", False)):
        counts.clear()
        await store.append(_next(seq, checked))
        seq += 1
        rows.append((name, dict(counts)))
    counts.clear()
    await store.read("a")
    assert store.stats["hot_hits"] == 1, store.stats
    rows.append(("read (a hot hit)", dict(counts)))
    # an earlier incarnation's copy at the same head (re-made past the hot tier)
    other = SQLiteBackend(where / "d.db")
    await other.delete_agent("a")
    new = [dataclasses.replace(e, payload=b"new") for e in appended("a", 0, seq).events]
    await other.append(AppendRequest("a", 0, new, head_tag=b"new"))
    await other.close()
    counts.clear()
    await store.append(_next(seq, False))
    rows.append(("unchecked append, stale copy", dict(counts)))
    for name, got in rows:
        hot = sum(v for k, v in got.items() if k.startswith("hot."))
        durable = sum(v for k, v in got.items() if k.startswith("durable."))
        print(f"{name:32} hot {hot}  durable {durable}  {dict(sorted(got.items()))}")
    await store.close()


async def cpu(kind: str, n: int, tiers: str) -> None:
    where = Path(tempfile.mkdtemp())
    store = _tiered(where, tiers)
    await store.initialize()
    await store.append(dataclasses.replace(appended("a", 0, 1), head_tag=b"t-1"))
    for seq in range(1, 51):  # (warm)
        await store.append(_next(seq, True))
    start = time.thread_time()
    for seq in range(51, 51 + n):
        await store.append(_next(seq, kind == "tagged"))
    spent = time.thread_time() - start
    assert store.hot is not None and await store.hot.head("a") == 51 + n  # (mirrored)
    print(f"{kind}: {spent / n * 1e6:.1f} us CPU per append ({n} appends)")
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["calls", "cpu"])
    parser.add_argument("--kind", choices=["tagged", "unchecked"], default="tagged")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--tiers", choices=["sqlite", "memory"], default="sqlite")
    args = parser.parse_args()
    asyncio.run(calls() if args.what == "calls" else cpu(args.kind, args.n, args.tiers))


if __name__ == "__main__":
    main()
