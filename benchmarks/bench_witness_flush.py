"""What one flush of the automatic witness costs with a full file: CPU and file size.

The flush (``HighWater.flush``: read the file, merge, JSON, seal, ``fsync``, rename) runs
in a thread at most once per ``witness_interval``, off the save path; its cost grows
with the file (up to ``keep``, 1,024 marks). Run it in two trees to compare them (the
marks carry their stream's incarnation, ``c``, since h/witness)::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_witness_flush.py --rounds 5

Reported: the file's size, and the process CPU time of each flush of ``--marks`` marks
(all noted again before each), sorted, with the median.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import tempfile
import time

from _common import median
from statekeeper import StateStore


async def _run(marks: int, rounds: int) -> tuple[str, list[float]]:
    folder = tempfile.mkdtemp()
    async with StateStore(f"sqlite:///{folder}/s.db", witness_interval=3600) as store:
        for i in range(marks):
            await store.save(f"agent-{i}", {"n": i})
        witness = store.witness
        assert witness is not None
        with_created = "created" in inspect.signature(witness.acked).parameters
        link = b"\1" * 32
        times: list[float] = []
        for _ in range(rounds):
            for i in range(marks):
                if with_created:
                    witness.acked(f"agent-{i}", 1, link, 1.7e9 + i)
                else:
                    witness.acked(f"agent-{i}", 1, link)
            began = time.process_time()
            await witness.flush()
            times.append(time.process_time() - began)
        return witness.path, sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--marks", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path, times = asyncio.run(_run(args.marks, args.rounds))
    size = os.path.getsize(path)
    runs = ", ".join(f"{t * 1000:.1f}" for t in times)
    print(f"file {size:,} bytes; flush CPU ms: {runs} (median {median(times) * 1000:.1f})")


if __name__ == "__main__":
    main()
