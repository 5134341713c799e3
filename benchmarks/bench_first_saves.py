"""Latency of ``bench_hotpath.py``'s sequential saves by their place in a round (issue 11,
"perf-normal"): each round opens a new store file (and a new ``SqliteSaver`` file, set
up untimed) and saves 4 agents 21 times, one more ~300-character message a step,
``StateStore.save``, ``SqliteSaver.put`` and a bare commit interleaved per operation
(``bench_hotpath.seq_round`` itself). Medians over ``--rounds`` rounds, in µs:

- ``first``: the round's first save (the store's first write);
- ``creates``: the other agents' first saves;
- ``second``: each agent's second save;
- ``steady``: the saves of steps 3 and later;
- ``round``: the round's total, and the median of ``put``'s round over the store's
  (above 1: the store's round was faster).

Run it once per tree for an A/B (``PYTHONPATH`` at each tree's ``src``, alternated)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_first_saves.py --rounds 40
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hotpath
from _common import Workload

PLACES = ("first", "creates", "second", "steady", "round")


async def run(rounds: int, sync: str) -> dict[str, dict[str, float]]:
    wl = Workload(4, 10, 30, chars=bench_hotpath.CHARS)
    n = len(wl.agent_ids)
    acc: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            res = await bench_hotpath.seq_round(Path(d), f"{sync}-{r}", sync, wl, first=r)
            for side in ("sk", "lg"):
                lat = res[side]["lat"]
                acc.setdefault((side, "first"), []).append(lat[0])
                acc.setdefault((side, "creates"), []).extend(lat[1:n])
                acc.setdefault((side, "second"), []).extend(lat[n : 2 * n])
                acc.setdefault((side, "steady"), []).extend(lat[3 * n :])
                acc.setdefault((side, "round"), []).append(sum(lat))
    out = {
        side: {place: 1e6 * statistics.median(acc[(side, place)]) for place in PLACES}
        for side in ("sk", "lg")
    }
    out["ratio"] = {
        "round": statistics.median(
            lg / sk for sk, lg in zip(acc[("sk", "round")], acc[("lg", "round")], strict=True)
        )
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--sync", default="NORMAL", choices=["FULL", "NORMAL"])
    args = parser.parse_args()
    res = asyncio.run(run(args.rounds, args.sync))
    for side, name in (("sk", "StateStore.save"), ("lg", "SqliteSaver.put")):
        cells = "  ".join(f"{p} {res[side][p]:,.0f}" for p in PLACES)
        print(f"{name:16} µs, median: {cells}")
    print(f"put's round / the store's round, median: {res['ratio']['round']:.2f}")


if __name__ == "__main__":
    main()
