"""``statekeeper bench --json`` sometimes printed "Task was destroyed but it is
pending! … statekeeper-witness": the bench's stores share one backend, so it never
closes them, and a store dropped unclosed left its witness's guard task (waiting for
the loop's shutdown to write the marks) pending in a cycle with the witness, destroyed
pending when the garbage collector took both. A witness collected with nothing to
write ends its guard; this test turns asyncio's report of a task destroyed pending
into a failure."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.bench.seed import run_bench


def _reports() -> list[dict[str, Any]]:
    """What the running loop's exception handler is given from now on."""
    seen: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    return seen


async def test_a_store_dropped_unclosed_leaves_no_witness_task_pending(tmp_path: Path) -> None:
    seen = _reports()
    backend = SQLiteBackend(str(tmp_path / "a.db"))
    writer = StateStore(backend)
    await writer.save("a", {"n": 1})
    reader = StateStore(backend, cache_size=0)
    await reader.load("a")  # (its first use starts its witness's guard)
    witness = reader._witness
    assert witness is not None and witness._guard is not None
    guard = weakref.ref(witness._guard)
    for _ in range(1000):  # until the guard waits (a task never started is the loop's)
        if guard().get_coro().cr_await is not None:  # type: ignore[union-attr]
            break
        await asyncio.sleep(0)
    del reader, witness
    gc.collect()
    for _ in range(1000):  # (its cancellation runs on the loop)
        if guard() is None or guard().done():  # type: ignore[union-attr]
            break
        await asyncio.sleep(0)
    gc.collect()
    await writer.close()
    destroyed = [c for c in seen if "destroyed but it is pending" in str(c.get("message"))]
    assert destroyed == [], destroyed


async def test_bench_leaves_no_task_pending(tmp_path: Path) -> None:
    seen = _reports()
    rows = await run_bench(agents=2, saves=2, only=["local", "event"])
    assert len(rows) == 2 and all(r.skipped is None and r.saves == 4 for r in rows), rows
    for _ in range(3):  # (a guard cancelled by a collection ends on the loop)
        gc.collect()
        await asyncio.sleep(0)
    destroyed = [c for c in seen if "destroyed but it is pending" in str(c.get("message"))]
    assert destroyed == [], destroyed
