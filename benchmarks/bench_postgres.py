"""Chat checkpointing on PostgreSQL: statekeeper vs LangGraph's AsyncPostgresSaver.

Same server, same run, same workload: 16 agents checkpoint concurrently, each a chat
history growing from 20 to 50 messages of ~200 characters (31 saves per agent, 496 in
all), messages as plain dicts for both (this compares storage, not LangChain message
serialization). Inputs are built before the timer starts, for both.

- statekeeper: ``StateStore(PostgresBackend(dsn, schema=...), durability=...)`` and
  ``await store.save(agent, {"messages": [...]})`` from 16 concurrent tasks. Every save
  is committed before it returns in both modes measured (RPO 0):
  ``group`` (concurrent saves share one transaction: one ``sk_append`` call each,
  pipelined) and ``sync`` (one transaction per save, 16 in flight over the pool).
- AsyncPostgresSaver (langgraph-checkpoint-postgres): real ``Checkpoint`` dicts
  (``empty_checkpoint``/``create_checkpoint``/``get_next_version``, parent config
  chained) and ``await saver.aput(...)`` from 16 concurrent tasks. Only ``aput`` is
  timed (a LangGraph step also calls ``aput_writes``: leaving it out favours the peer).
  Three ways of running it, the best one is the peer:
  ``pool``: one saver on an ``AsyncConnectionPool`` (max 16) — the documented setup,
  whose saver-wide ``asyncio.Lock`` serialises every call; ``pipeline``: one saver on
  one connection in pipeline mode (``from_conn_string(pipeline=True)``); ``per-agent``:
  one saver per agent sharing the pool (bypasses the lock; not a documented setup).
- Loads: 16 concurrent latest-state loads per agent round: statekeeper with the cache
  off (``cache_size=0``: head + snapshot + events after it, verified and folded) vs
  ``aget_tuple``.

Rounds alternate which library goes first; each round uses fresh agent/thread ids in
schemas created for the run (dropped at the end). Medians over rounds; ratios are
statekeeper / best peer.

Run::

    .venv/bin/python benchmarks/bench_postgres.py                      # 5 rounds
    .venv/bin/python benchmarks/bench_postgres.py --quick              # 2 rounds
    .venv/bin/python benchmarks/bench_postgres.py --dsn postgresql://user@host/db

Needs ``pip install 'statekeeper[postgres]' langgraph-checkpoint-postgres``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from _common import machine, median, percentile, source_state, table
from bench_checkpoint import Workload, lg_checkpoints, lg_config
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.store.store import StateStore

AGENTS = 16
FIRST, LAST = 20, 50
TARGET = 2.0
DEFAULT_DSN = os.environ.get(
    "STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def _admin(dsn: str, statement: sql.Composable) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def _with_search_path(dsn: str, schema: str) -> str:
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}"


class Cpu:
    """CPU seconds spent by this process and by the server backends serving one side
    (found by ``application_name`` in ``pg_stat_activity``; /proc of the same machine),
    so a run on a loaded machine still says what one save costs."""

    def __init__(self, dsn: str, app: str) -> None:
        self.dsn, self.app = dsn, app

    def _server(self) -> float:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            pids = [
                r[0]
                for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.app,)
                ).fetchall()
            ]
        ticks = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone, or another machine's server
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self._client0, self._server0 = time.process_time(), self._server()

    def stop(self, n: int) -> dict[str, float]:
        client = time.process_time() - self._client0
        server = self._server() - self._server0
        return {"client_us": 1e6 * client / n, "server_us": 1e6 * server / n}


# --------------------------------------------------------------------- statekeeper


async def sk_run(
    backend: PostgresBackend,
    wl: Workload,
    agents: list[str],
    durability: str,
    *,
    validate_cache: bool = True,
    cpu: Cpu | None = None,
) -> dict[str, Any]:
    docs = {a: wl.docs(a) for a in agents}
    lat: list[float] = []
    # not closed: closing a store closes its backend, which the next run reuses
    store = StateStore(backend, durability=durability, validate_cache=validate_cache)

    async def run(a: str) -> None:
        for doc in docs[a]:
            t0 = time.perf_counter()
            await store.save(a, doc)
            lat.append(time.perf_counter() - t0)

    if cpu is not None:
        cpu.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(a) for a in agents))
    elapsed = time.perf_counter() - t0
    await store.flush()
    commits = store.stats().commits
    n = len(agents) * len(wl.sizes)
    return {
        "rate": n / elapsed,
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        "commits": commits,
        **(cpu.stop(n) if cpu is not None else {}),
    }


async def sk_loads(backend: PostgresBackend, wl: Workload, agents: list[str]) -> dict[str, Any]:
    store = StateStore(backend, cache_size=0)
    lat: list[float] = []

    async def one(a: str) -> None:
        t0 = time.perf_counter()
        snap = await store.load(a)
        lat.append(time.perf_counter() - t0)
        assert len(snap.data["messages"]) == wl.sizes[-1]

    t0 = time.perf_counter()
    for _ in range(5):
        await asyncio.gather(*(one(a) for a in agents))
    elapsed = time.perf_counter() - t0
    return {"rate": len(lat) / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


# --------------------------------------------------------------- AsyncPostgresSaver


async def lg_run(
    savers: list[Any], wl: Workload, agents: list[str], cpu: Cpu | None = None
) -> dict[str, Any]:
    """Agent ``i`` uses ``savers[i % len(savers)]``."""
    plans = {a: lg_checkpoints(savers[0], wl, a) for a in agents}
    lat: list[float] = []

    async def run(i: int, a: str) -> None:
        saver = savers[i % len(savers)]
        cfg = lg_config(a)
        for cp, meta, versions in plans[a]:
            t0 = time.perf_counter()
            cfg = await saver.aput(cfg, cp, meta, versions)
            lat.append(time.perf_counter() - t0)

    if cpu is not None:
        cpu.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(i, a) for i, a in enumerate(agents)))
    elapsed = time.perf_counter() - t0
    n = len(agents) * len(wl.sizes)
    return {
        "rate": n / elapsed,
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        **(cpu.stop(n) if cpu is not None else {}),
    }


async def lg_loads(saver: Any, wl: Workload, agents: list[str]) -> dict[str, Any]:
    lat: list[float] = []

    async def one(a: str) -> None:
        t0 = time.perf_counter()
        tup = await saver.aget_tuple(lg_config(a))
        lat.append(time.perf_counter() - t0)
        assert len(tup.checkpoint["channel_values"]["messages"]) == wl.sizes[-1]

    t0 = time.perf_counter()
    for _ in range(5):
        await asyncio.gather(*(one(a) for a in agents))
    elapsed = time.perf_counter() - t0
    return {"rate": len(lat) / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


# ------------------------------------------------------------------------------ main


async def main(dsn: str, rounds: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    tag = f"{os.getpid()}_{int(time.time())}"
    sk_schema, lg_schema = f"skbench_{tag}", f"lgbench_{tag}"
    _admin(dsn, sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(lg_schema)))
    lg_dsn = _with_search_path(dsn, lg_schema)
    sk_app, lg_app = f"skbench{tag}", f"lgbench{tag}"
    lg_dsn += f"&application_name={lg_app}"
    sep = "&" if "?" in dsn else "?"
    backend = PostgresBackend(
        f"{dsn}{sep}application_name={sk_app}", schema=sk_schema, max_size=AGENTS
    )
    sk_cpu, lg_cpu = Cpu(dsn, sk_app), Cpu(dsn, lg_app)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        lg_dsn,
        min_size=AGENTS,
        max_size=AGENTS,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    results: dict[str, list[dict[str, Any]]] = {
        k: []
        for k in (
            "sk_group",
            "sk_group_single",
            "sk_sync",
            "lg_pool",
            "lg_pipeline",
            "lg_per_agent",
            "sk_loads",
            "lg_loads",
        )
    }
    wl = Workload(AGENTS, FIRST, LAST)
    try:
        await backend.open()
        await pool.open(wait=True)
        shared = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await shared.setup()
        per_agent = [AsyncPostgresSaver(pool) for _ in range(AGENTS)]  # type: ignore[arg-type]
        async with AsyncPostgresSaver.from_conn_string(lg_dsn, pipeline=True) as piped:
            for r in range(-1, rounds):  # round -1 warms both up (plans, prepares, caches)
                got: dict[str, dict[str, Any]] = {}

                def ids(kind: str, r: int = r) -> list[str]:
                    # fresh ids per round and per mode; Workload's message lists reused
                    return [f"{kind}-r{r}-{a}" for a in wl.agent_ids]

                for kind in results:
                    wl.messages.update({f"{kind}-r{r}-{a}": wl.messages[a] for a in wl.agent_ids})
                order = ["sk", "lg"] if r % 2 == 0 else ["lg", "sk"]
                for side in order:
                    if side == "sk":
                        got["sk_group"] = await sk_run(
                            backend, wl, ids("sk_group"), "group", cpu=sk_cpu
                        )
                        got["sk_group_single"] = await sk_run(
                            backend, wl, ids("sk_group_single"), "group", validate_cache=False
                        )
                        got["sk_sync"] = await sk_run(
                            backend, wl, ids("sk_sync"), "sync", cpu=sk_cpu
                        )
                        got["sk_loads"] = await sk_loads(backend, wl, ids("sk_group"))
                    else:
                        got["lg_pool"] = await lg_run([shared], wl, ids("lg_pool"), cpu=lg_cpu)
                        got["lg_pipeline"] = await lg_run([piped], wl, ids("lg_pipeline"))
                        got["lg_per_agent"] = await lg_run(
                            per_agent, wl, ids("lg_per_agent"), cpu=lg_cpu
                        )
                        got["lg_loads"] = await lg_loads(shared, wl, ids("lg_pool"))
                if r >= 0:
                    for key, value in got.items():
                        results[key].append(value)
                print(f"round {r + 1}/{rounds} done" if r >= 0 else "warm-up done", file=sys.stderr)
    finally:
        await pool.close()
        await backend.drop_all()
        await backend.close()
        _admin(dsn, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(lg_schema)))

    def med(key: str, field: str = "rate") -> float:
        return median([x[field] for x in results[key]])

    peer_modes = {k: med(k) for k in ("lg_pool", "lg_pipeline", "lg_per_agent")}
    peer = max(peer_modes, key=lambda k: peer_modes[k])
    summary = {
        "sk_group": med("sk_group"),
        "sk_group_single": med("sk_group_single"),
        "sk_sync": med("sk_sync"),
        **peer_modes,
        "peer_mode": peer,
        "ratio_group": med("sk_group") / peer_modes[peer],
        "ratio_group_single": med("sk_group_single") / peer_modes[peer],
        "ratio_group_vs_documented": med("sk_group") / peer_modes["lg_pool"],
        "ratio_sync": med("sk_sync") / peer_modes[peer],
        "sk_loads": med("sk_loads"),
        "lg_loads": med("lg_loads"),
        "ratio_loads": med("sk_loads") / med("lg_loads"),
        "latency_ms": {
            k: {
                "p50": round(1000 * med(k, "p50"), 3),
                "p99": round(1000 * med(k, "p99"), 3),
            }
            for k in results
        },
        "sk_group_commits": median([x["commits"] for x in results["sk_group"]]),
        "cpu_us_per_save": {
            k: {
                "client": round(med(k, "client_us"), 1),
                "server": round(med(k, "server_us"), 1),
            }
            for k in ("sk_group", "sk_sync", "lg_pool", "lg_per_agent")
        },
    }
    return summary


def report(summary: dict[str, Any], rounds: int, dsn: str) -> None:
    lat = summary["latency_ms"]
    peer = summary["peer_mode"]

    def row(label: str, key: str) -> list[Any]:
        return [label, f"{summary[key]:,.0f}", f"{lat[key]['p50']:.2f} / {lat[key]['p99']:.2f}"]

    verdict = "met" if summary["ratio_group"] >= TARGET else "MISSED"
    verdict_single = "met" if summary["ratio_group_single"] >= TARGET else "MISSED"
    rows = [
        row("statekeeper, durability=group (defaults)", "sk_group"),
        row("statekeeper, durability=group, validate_cache=False", "sk_group_single"),
        row("statekeeper, durability=sync (defaults)", "sk_sync"),
        row("AsyncPostgresSaver, one saver on a pool (documented)", "lg_pool"),
        row("AsyncPostgresSaver, one saver, pipeline connection", "lg_pipeline"),
        row("AsyncPostgresSaver, one saver per agent on a pool", "lg_per_agent"),
    ]
    print(f"\n16 agents x 31 checkpoints, concurrent; {rounds} rounds (medians)\n")
    print(table(["writes", "saves/s", "save latency p50 / p99 (ms)"], rows))
    print(
        f"\nratio, defaults (group / best peer = {peer}): {summary['ratio_group']:.2f}x "
        f"(target >= {TARGET:g}x: {verdict})\n"
        f"ratio, single writer per agent (validate_cache=False) / best peer: "
        f"{summary['ratio_group_single']:.2f}x (target >= {TARGET:g}x: {verdict_single})\n"
        f"ratio, defaults / the documented setup (one saver on a pool): "
        f"{summary['ratio_group_vs_documented']:.2f}x; sync / best peer: "
        f"{summary['ratio_sync']:.2f}x"
    )
    print(f"statekeeper group mode: {summary['sk_group_commits']:.0f} commits for 496 saves\n")
    cpu_rows = [
        [k, f"{v['client']:,.0f}", f"{v['server']:,.0f}", f"{v['client'] + v['server']:,.0f}"]
        for k, v in summary["cpu_us_per_save"].items()
    ]
    print(table(["CPU per save (us)", "client", "server", "total"], cpu_rows) + "\n")
    print(
        table(
            ["latest-state loads, 16 concurrent", "loads/s", "p50 / p99 (ms)"],
            [
                [
                    "statekeeper (cache off)",
                    f"{summary['sk_loads']:,.0f}",
                    f"{lat['sk_loads']['p50']:.2f} / {lat['sk_loads']['p99']:.2f}",
                ],
                [
                    "AsyncPostgresSaver.aget_tuple",
                    f"{summary['lg_loads']:,.0f}",
                    f"{lat['lg_loads']['p50']:.2f} / {lat['lg_loads']['p99']:.2f}",
                ],
            ],
        )
    )
    print(f"\nloads ratio: {summary['ratio_loads']:.2f}x")
    info = machine(
        "psycopg", "psycopg-pool", "langgraph-checkpoint", "langgraph-checkpoint-postgres"
    )
    with psycopg.connect(dsn) as conn:
        row0 = conn.execute("SHOW server_version").fetchone()
        info["postgresql"] = row0[0] if row0 else "?"
    info["source"] = source_state()
    print(json.dumps({"bench": "postgres", "rounds": rounds, **summary, "machine": info}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    summary = asyncio.run(main(args.dsn, rounds))
    report(summary, rounds, args.dsn)
