"""CPU cost of ``instrument(store)`` on the single-agent write path, same run.

One agent, sequential ``StateStore.save`` calls of a small, changing state (the
cheapest save there is, so the instrumentation's share is as large as it gets),
rounds alternating between a plain store and an instrumented one (metrics only; then
metrics + OpenTelemetry spans into an SDK provider with no exporter), each round on a
fresh store. CPU per save is ``time.process_time`` over the round; the report gives
the median over rounds and the overhead ratio with its spread (min..max of the per-
round-pair ratios)::

    python benchmarks/bench_observability.py [--rounds 15] [--saves 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from _common import machine
from statekeeper import StateStore
from statekeeper.observability.instrumentation import instrument


async def round_cpu(url: str, saves: int, mode: str, provider: Any) -> float:
    """CPU seconds per save of one round."""
    async with StateStore(url, witness=False) as store:
        if mode != "plain":
            instrument(
                store,
                registry=CollectorRegistry(),
                tracing=mode == "traced",
                tracer_provider=provider,
            )
        await store.save("agent", {"step": 0, "note": "x" * 200})
        t0 = time.process_time()
        for n in range(1, saves + 1):
            await store.save("agent", {"step": n, "note": "x" * 200})
        return (time.process_time() - t0) / saves


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--saves", type=int, default=2000)
    args = parser.parse_args()
    provider: Any = None
    modes = ["plain", "metrics"]
    try:
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        modes.append("traced")
    except ImportError:
        pass
    out: dict[str, Any] = {"machine": machine("prometheus-client", "opentelemetry-sdk")}
    with tempfile.TemporaryDirectory() as tmp:
        for label, url in (
            ("memory", "memory://"),
            ("sqlite NORMAL", "sqlite:///{}?synchronous=NORMAL"),
        ):
            cpu: dict[str, list[float]] = {m: [] for m in modes}
            for r in range(args.rounds):
                order = modes if r % 2 == 0 else modes[::-1]
                for mode in order:  # a fresh database file per round
                    where = url.format(Path(tmp) / f"{label[:6]}-{r}-{mode}.db")
                    cpu[mode].append(await round_cpu(where, args.saves, mode, provider))
            plain = cpu["plain"]
            for mode in modes:
                out[f"{label}: {mode} cpu us/save (median)"] = round(
                    statistics.median(cpu[mode]) * 1e6, 2
                )
            for mode in modes[1:]:
                ratios = [m / p for m, p in zip(cpu[mode], plain, strict=True)]
                out[f"{label}: {mode} overhead % (median [min..max])"] = (
                    f"{(statistics.median(ratios) - 1) * 100:.2f}"
                    f" [{(min(ratios) - 1) * 100:.2f}..{(max(ratios) - 1) * 100:.2f}]"
                )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
