"""What carrying the fencing tokens costs an export and a backup (and their import and
restore): process CPU seconds of each, on SQLite and PostgreSQL, N agents of which
every other one was leased. Run once per tree (``PYTHONPATH=<tree>/src``) in the same
session and compare the medians; prints one JSON line per (engine, step) with every
sample.

    PYTHONPATH=<tree>/src python benchmarks/bench_lease_carry.py [--agents N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import _common  # noqa: F401  (the statekeeper measured: PYTHONPATH's, else this checkout's)
from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.governance.backup import BackupKey, backup, restore

PG = os.environ.get("SK_BENCH_PG", "postgresql://127.0.0.1:5432/test")


async def _fill(url: str, agents: int) -> None:
    async with StateStore(url) as store:
        for start in range(0, agents, 200):
            ids = [f"agent-{i:06d}" for i in range(start, min(start + 200, agents))]
            await asyncio.gather(*(store.save(a, {"n": 1, "text": "x" * 200}) for a in ids))
        for i in range(0, agents, 2):
            lease = await store.backend.acquire_lease(f"agent-{i:06d}", "w1", 300.0)
            await store.backend.release_lease(lease.agent_id, "w1", lease.token)


def _url(engine: str, folder: Path, name: str) -> tuple[str, str]:
    if engine == "sqlite":
        return f"sqlite:///{folder / name}.db", ""
    schema = f"bench_lc_{uuid.uuid4().hex[:10]}"
    return f"{PG}?schema={schema}", schema


def _drop(schema: str) -> None:
    if schema:
        import psycopg

        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def _round(engine: str, agents: int) -> dict[str, float]:
    out: dict[str, float] = {}
    key = BackupKey(os.urandom(32))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src, s1 = _url(engine, folder, "src")
        dst, s2 = _url(engine, folder, "dst")
        rst, s3 = _url(engine, folder, "rst")
        try:
            await _fill(src, agents)
            async with StateStore(dst) as store:
                await store.save("other", {"n": 0})
            async with StateStore(src) as store:
                buf = io.BytesIO()
                t = time.process_time()
                await export_agents(store, None, buf)
                out["export"] = time.process_time() - t
                t = time.process_time()
                await backup(store, folder / "b.skb", key)
                out["backup"] = time.process_time() - t
            t = time.process_time()
            await import_agents(dst, io.BytesIO(buf.getvalue()))
            out["import"] = time.process_time() - t
            async with StateStore(rst) as store:
                t = time.process_time()
                await restore(store, [folder / "b.skb"], key)
                out["restore"] = time.process_time() - t
        finally:
            for schema in (s1, s2, s3):
                _drop(schema)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    args = parser.parse_args()
    import statekeeper

    for engine in args.engines.split(","):
        samples = [asyncio.run(_round(engine, args.agents)) for _ in range(args.rounds)]
        for step in samples[0]:
            values = sorted(s[step] for s in samples)
            print(
                json.dumps(
                    {
                        "tree": str(Path(statekeeper.__file__).parents[2]),
                        "engine": engine,
                        "step": step,
                        "agents": args.agents,
                        "cpu_s_median": round(values[len(values) // 2], 4),
                        "cpu_s": [round(v, 4) for v in values],
                    }
                )
            )


if __name__ == "__main__":
    main()
