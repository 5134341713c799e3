"""What a fencing token costs on the write path: fenced vs unfenced ``save``.

    python benchmarks/bench_fencing.py [URL ...]     # default: a temporary SQLite file

One process, one agent, ``--saves`` sequential ``store.save(agent, {"i": n})`` calls
(durability ``sync``, every other store option at its default), first without a
lease, then under a lease from :class:`~statekeeper.concurrency.LeaseManager`; the two
runs alternate ``--rounds`` times and the median rate of each is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts src/ on sys.path)
from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager


async def rate(url: str, agent: str, saves: int, fenced: bool) -> float:
    async with StateStore(url) as store:
        lease = (
            await LeaseManager(store, holder="bench", ttl=600).acquire(agent) if fenced else None
        )
        started = time.perf_counter()
        for n in range(saves):
            await store.save(agent, {"i": n}, lease=lease)
        elapsed = time.perf_counter() - started
        if lease is not None:
            await lease.release()
        return saves / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="*")
    parser.add_argument("--saves", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    urls = args.urls or [f"sqlite:///{Path(tempfile.mkdtemp()) / 'fencing.db'}"]
    for url in urls:
        plain: list[float] = []
        fenced: list[float] = []
        for r in range(args.rounds):
            plain.append(await rate(url, f"plain-{r}", args.saves, False))
            fenced.append(await rate(url, f"fenced-{r}", args.saves, True))
        p, f = statistics.median(plain), statistics.median(fenced)
        print(
            f"{url.split(':')[0]}: {args.saves} saves x {args.rounds} rounds: "
            f"unfenced {p:,.0f}/s, fenced {f:,.0f}/s ({100 * f / p:.0f} %)"
        )


if __name__ == "__main__":
    asyncio.run(main())
