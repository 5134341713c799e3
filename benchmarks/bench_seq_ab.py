"""Section 1 of a tree's own ``bench_hotpath.py`` only: the sequential durable save.

For A/B runs between two trees in the same minutes (issue 11, helper full11): the
sequential workload (``StateStore.save``, ``SqliteSaver.put`` and a bare one-row commit
interleaved per operation) run by the ``seq_round``/``seq_summary``/``seq_table`` of
the ``bench_hotpath.py`` in ``--tree`` (default: this one), against the statekeeper on
``PYTHONPATH``; sections 2-4 (concurrency curve, cold loads, fresh process) skipped.
Prints the table and one ``RESULT`` line of JSON (the rate, steady-rate, %-of-floor and
CPU ratios, each median/min/max over the rounds)::

    .venv/bin/python benchmarks/bench_seq_ab.py --sync FULL
    PYTHONPATH=<base tree>/src .venv/bin/python benchmarks/bench_seq_ab.py --tree <base tree>
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


async def run(tree: Path, sync: str, quick: bool, rounds: int | None) -> dict[str, Any]:
    sys.path.insert(0, str(tree / "benchmarks"))
    hot = importlib.import_module("bench_hotpath")
    common = importlib.import_module("_common")
    agents, last, default_rounds = (4, 30, 2) if quick else (8, 60, 5)
    wl = common.Workload(agents, 10, last, chars=hot.CHARS)
    with tempfile.TemporaryDirectory(prefix="sk-seq-ab-") as d:
        done = [
            await hot.seq_round(Path(d), f"{sync}-{r}", sync, wl, first=r)
            for r in range(rounds or default_rounds)
        ]
    summary: dict[str, Any] = hot.seq_summary(done, len(wl.agent_ids))
    print(hot.seq_table({sync: summary}))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--quick", action="store_true", help="4 agents x 21 saves, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (quick: 2)")
    args = parser.parse_args(argv)
    x = asyncio.run(run(args.tree.resolve(), args.sync, args.quick, args.rounds))
    keys = {"ratio": "ratio_sk_lg", "steady": "ratio_sk_lg_steady"}
    keys |= {"pct": "pct_floor_sk", "cpu": "cpu_ratio_sk_lg"}
    print("RESULT", json.dumps({k: x[v] for k, v in keys.items()}))


if __name__ == "__main__":
    main()
