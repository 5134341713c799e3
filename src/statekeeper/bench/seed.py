"""The seed's performance table, measured on this machine (``statekeeper bench`` runs it).

The seed article claims a latency range for each storage strategy (In-Memory <1 ms,
Redis 1–5 ms, PostgreSQL 5–20 ms, Event Sourcing 2–10 ms, S3 archival 50–200 ms,
Hybrid 1–20 ms). This command runs the same agent-state workload through
:class:`~statekeeper.store.StateStore` on each engine and reports the measured p50/p99
latency of a save and of a load beside the claim.

* save: ``StateStore.save(agent, state)`` in ``sync`` durability — the call returns
  after the backend committed (RPO 0); the state is a chat that grows by one ~200
  character message per save, so each save stores a small JSON Patch.
* load: ``StateStore.load(agent)`` with the cache off (``cache_size=0``): every load
  reads the head, the latest snapshot and the events after it, verifies and folds.
* Event Sourcing: ``StateStore.append(agent, "tool_call", info)`` (one event) and a
  load that replays the whole stream (no snapshots, no cache), on the embedded SQLite.
* Hybrid: Redis (hot) → PostgreSQL (durable) through
  :class:`~statekeeper.backends.tiered.TieredBackend`.

Servers come from options or the environment (``STATEKEEPER_REDIS_URL``,
``STATEKEEPER_POSTGRES_URL``, ``STATEKEEPER_S3_URL``); with ``--s3 auto`` (the
default) a moto S3 server is started on loopback when moto is installed. A strategy
whose server is unreachable is reported as skipped, with the reason. Everything the
benchmark writes lives in its own schema / key prefix / bucket and is deleted after.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .workload import chat_message, percentile

if TYPE_CHECKING:
    from ..backends.base import Backend

#: the timer every measured save and load is read from (seconds). Replaceable for a
#: test whose expected output must not follow the machine's load: the verdict compares
#: what this timer measured with the seed's claims.
timer: Callable[[], float] = time.perf_counter

__all__ = [
    "SEED_CLAIMS",
    "STRATEGIES",
    "BenchRow",
    "ProgressSink",
    "moto_server",
    "run_bench",
    "strategy_key",
    "unknown_strategies",
]


class ProgressSink(Protocol):
    """Where :func:`run_bench` reports progress (a ``rich.progress.Progress`` fits)."""

    def add_task(self, description: str, *, total: float | None = ...) -> Any: ...

    def advance(self, task_id: Any, advance: float = 1) -> None: ...

    def update(self, task_id: Any, *, completed: float | None = None) -> None: ...


#: the seed article's "Performance Considerations" table: (low, high) latency in ms
SEED_CLAIMS: dict[str, tuple[float, float]] = {
    "In-Memory": (0.0, 1.0),
    "Redis": (1.0, 5.0),
    "PostgreSQL": (5.0, 20.0),
    "Event Sourcing": (2.0, 10.0),
    "S3 Archival": (50.0, 200.0),
    "Hybrid (Redis + DB)": (1.0, 20.0),
}
STRATEGIES = [*SEED_CLAIMS, "Local (SQLite)"]


@dataclass
class BenchRow:
    """One measured strategy (all latencies in milliseconds)."""

    strategy: str
    engine: str
    saves: int = 0
    loads: int = 0
    save_p50: float | None = None
    save_p99: float | None = None
    load_p50: float | None = None
    load_p99: float | None = None
    claim_ms: tuple[float, float] | None = None
    verdict: str = ""
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)


def strategy_key(strategy: str) -> str:
    """The short name ``--only`` takes for a strategy: its first word, lower case."""
    return strategy.split()[0].lower()


def unknown_strategies(only: list[str] | None) -> list[str]:
    """The names in ``only`` that match no strategy (see :func:`strategy_key`)."""
    valid = {strategy_key(s) for s in STRATEGIES} | {s.lower() for s in STRATEGIES}
    return [name for name in only or () if name.lower() not in valid]


def _verdict(row: BenchRow) -> str:
    """Where the slower of save p50 and load p50 falls against the seed's range."""
    if row.claim_ms is None or row.save_p50 is None or row.load_p50 is None:
        return ""
    low, high = row.claim_ms
    worst = max(row.save_p50, row.load_p50)
    if worst < low:
        return "faster than claimed"
    if worst <= high:
        return "within the claim"
    return "slower than claimed"


# -- servers ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server() -> Iterator[str | None]:
    """A moto S3 server on a loopback port for the duration (None if moto is absent)."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        yield None
        return
    import urllib.request

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                    break
            except Exception:
                time.sleep(0.1)
        yield url if proc.poll() is None else None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- workloads ----------------------------------------------------------------------------

Factory = Callable[[], Awaitable["Backend"]]


@contextlib.asynccontextmanager
async def _backend(factory: Factory) -> AsyncIterator[Backend]:
    backend = await factory()
    try:
        yield backend
    finally:
        drop = getattr(backend, "drop_all", None)
        with contextlib.suppress(Exception):
            if drop is not None:
                await drop()
        if getattr(backend, "name", "") == "tiered":
            for tier in (backend.hot, backend.durable, backend.cold):  # type: ignore[attr-defined]
                tier_drop = getattr(tier, "drop_all", None)
                if tier_drop is not None:
                    with contextlib.suppress(Exception):
                        await tier_drop()
        with contextlib.suppress(Exception):
            await backend.close()


async def _measure(
    row: BenchRow,
    factory: Factory,
    *,
    agents: int,
    saves: int,
    event_sourcing: bool,
    tick: Callable[[], None],
) -> None:
    from ..store import StateStore

    rng = random.Random(7)
    async with _backend(factory) as backend:
        health = await backend.health()
        if not health.ok:
            row.skipped = str(health.detail.get("error", "unhealthy"))
            return
        ids = [f"bench-{i:03d}" for i in range(agents)]
        save_lat: list[float] = []
        load_lat: list[float] = []
        writer = StateStore(
            backend,
            durability="sync",
            cache_size=1024,
            snapshot_every=10**9 if event_sourcing else 100,
        )
        history: dict[str, list[dict[str, str]]] = {a: [] for a in ids}
        for step in range(saves):
            for agent_id in ids:
                if event_sourcing:
                    info = {
                        "tool": "search",
                        "step": step,
                        "query": chat_message(rng, step)["content"],
                    }
                    t0 = timer()
                    if step == 0:
                        await writer.create(agent_id, {"task": "research"})
                    else:
                        await writer.append(agent_id, "tool_call", info)
                else:
                    history[agent_id].append(chat_message(rng, step))
                    state = {"messages": history[agent_id], "step": step, "status": "running"}
                    t0 = timer()
                    await writer.save(agent_id, state)
                save_lat.append(timer() - t0)
                tick()
        # the reader is a separate store with no cache: every load goes to the backend
        reader = StateStore(
            backend,
            cache_size=0,
            snapshot_every=10**9 if event_sourcing else 100,
        )
        for _ in range(saves):
            for agent_id in ids:
                t0 = timer()
                await reader.load(agent_id)
                load_lat.append(timer() - t0)
                tick()
        row.saves, row.loads = len(save_lat), len(load_lat)
        row.save_p50 = percentile(save_lat, 50) * 1000
        row.save_p99 = percentile(save_lat, 99) * 1000
        row.load_p50 = percentile(load_lat, 50) * 1000
        row.load_p99 = percentile(load_lat, 99) * 1000
        row.verdict = _verdict(row)
        # the stores share the backend: close neither (``_backend`` closes it)


@dataclass
class _Plan:
    strategy: str
    engine: str
    factory: Factory | None
    skipped: str | None = None
    event_sourcing: bool = False


async def run_bench(
    *,
    agents: int = 10,
    saves: int = 50,
    only: list[str] | None = None,
    redis_url: str | None = None,
    postgres_url: str | None = None,
    s3_url: str | None = None,
    progress: ProgressSink | None = None,
) -> list[BenchRow]:
    """Measure every strategy (or ``only`` those) and return the rows."""
    tmp = tempfile.mkdtemp(prefix="sk-bench-")
    tag = f"sk_bench_{os.getpid()}_{int(time.time())}"
    plans: list[_Plan] = []

    async def memory() -> Backend:
        from ..backends.memory import MemoryBackend

        return MemoryBackend()

    async def sqlite(name: str) -> Backend:
        from ..backends.sqlite import SQLiteBackend

        return SQLiteBackend(os.path.join(tmp, name))

    async def redis() -> Backend:
        from ..backends.redis import RedisBackend

        assert redis_url is not None
        return RedisBackend.from_url(redis_url, prefix=tag + ":", retry_timeout=2)

    async def postgres() -> Backend:
        from ..backends.postgres import PostgresBackend

        assert postgres_url is not None
        return PostgresBackend.from_url(
            postgres_url, schema=tag, pool_timeout=5, retry_timeout=5, max_size=4
        )

    async def s3() -> Backend:
        from ..backends.s3 import S3Backend

        assert s3_url is not None
        return S3Backend.from_url(s3_url.replace("{tag}", tag.replace("_", "-")))

    async def hybrid() -> Backend:
        from ..backends.tiered import TieredBackend

        hot = await redis()
        hot.retry_timeout = 0  # type: ignore[attr-defined]
        return TieredBackend(await postgres(), hot=hot)

    no_redis = None if redis_url else "no Redis URL (--redis or $STATEKEEPER_REDIS_URL)"
    no_pg = None if postgres_url else "no PostgreSQL URL (--postgres or $STATEKEEPER_POSTGRES_URL)"
    no_s3 = None if s3_url else "no S3 endpoint (--s3 URL, or install moto for --s3 auto)"
    plans = [
        _Plan("In-Memory", "memory://", memory),
        _Plan("Redis", "redis", redis, no_redis),
        _Plan("PostgreSQL", "postgresql", postgres, no_pg),
        _Plan(
            "Event Sourcing",
            "sqlite (append + full replay)",
            lambda: sqlite("events.db"),
            event_sourcing=True,
        ),
        _Plan("S3 Archival", "s3", s3, no_s3),
        _Plan("Hybrid (Redis + DB)", "tiered: redis → postgresql", hybrid, no_redis or no_pg),
        _Plan("Local (SQLite)", "sqlite (synchronous=FULL)", lambda: sqlite("local.db")),
    ]
    if only:
        wanted = {o.lower() for o in only}
        plans = [
            p for p in plans if p.strategy.lower() in wanted or strategy_key(p.strategy) in wanted
        ]
    rows: list[BenchRow] = []
    try:
        for plan in plans:
            row = BenchRow(plan.strategy, plan.engine, claim_ms=SEED_CLAIMS.get(plan.strategy))
            rows.append(row)
            if plan.skipped is not None or plan.factory is None:
                row.skipped = plan.skipped
                continue
            task = None
            if progress is not None:
                task = progress.add_task(plan.strategy, total=2 * agents * saves)

            def tick(task: Any = task) -> None:
                if progress is not None and task is not None:
                    progress.advance(task)

            try:
                await _measure(
                    row,
                    plan.factory,
                    agents=agents,
                    saves=saves,
                    event_sourcing=plan.event_sourcing,
                    tick=tick,
                )
            except Exception as exc:  # a strategy that cannot run is reported, not fatal
                row.skipped = f"{type(exc).__name__}: {exc}"
            if progress is not None and task is not None:
                progress.update(task, completed=2 * agents * saves)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
