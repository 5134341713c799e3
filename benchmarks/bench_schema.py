"""Issue 14: schema migrations and typed conversations, measured.

1. Migration rate: N agents stored at schema version 1 (a rename + a type change),
   migrated to version 2 with ``statekeeper.schema.migrate.migrate`` on SQLite (and
   PostgreSQL with ``--postgres DSN``); peer: the same upcast done by a hand-written
   script on a plain table (SELECT all, UPDATE in batches of 1,000 per transaction) —
   the floor of any migration that keeps no history. Reports agents/s, CPU s per 1k
   agents and the process RSS sampled during the run (flat = does not grow with N).
2. Typed conversation: bytes written per appended message at 10/100/1,000 messages and
   CPU per save, typed (``Conversation`` model) vs an untyped dict agent.

Usage: ``.venv/bin/python benchmarks/bench_schema.py [--n 100000] [--quick]
[--postgres postgresql://…/test]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

import _common
from statekeeper import StateStore
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate
from statekeeper.schema.structures import Conversation


class V1(BaseModel):
    customer_name: str
    priority: str = "normal"
    tags: list[str] = Field(default_factory=list)


class V2(BaseModel):
    customer: str
    priority: int = 2
    tags: list[str] = Field(default_factory=list)


LEVELS = {"low": 1, "normal": 2, "high": 3}
v1 = SchemaRegistry().register(V1, name="support", version=1)
v2 = SchemaRegistry().register(V2, name="support", version=2)


@v2.upcaster(1)
def _up(doc: dict[str, Any]) -> dict[str, Any]:
    doc["customer"] = doc.pop("customer_name")
    doc["priority"] = LEVELS[doc["priority"]]
    return doc


class RSS:
    """Sample the process RSS every 50 ms on a thread."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self.proc.memory_info().rss)

    def __enter__(self) -> RSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        s = self.samples or [self.proc.memory_info().rss]
        q = max(len(s) // 4, 1)
        return {
            "rss_first_quarter_mib": round(max(s[:q]) / 2**20, 1),
            "rss_last_quarter_mib": round(max(s[-q:]) / 2**20, 1),
        }


async def populate(url: str, n: int) -> None:
    async with StateStore(url, durability="group", cache_size=0) as store:
        states = TypedStates(store, v1)
        for start in range(0, n, 1000):
            await asyncio.gather(
                *(
                    states.create(
                        f"agent-{i:07d}",
                        V1(customer_name=f"c{i}", priority=("low", "normal", "high")[i % 3]),
                    )
                    for i in range(start, min(n, start + 1000))
                )
            )


CHECKPOINTS = (10_000, 50_000, 100_000)


async def run_migration(
    url: str,
    n: int,
    *,
    traced: bool = False,
    populated: bool = False,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if not populated:
        await populate(url, n)
    import psutil

    proc = psutil.Process()
    marks: dict[str, dict[str, float]] = {}
    cpu = wall = 0.0

    def progress(done: int, total: int) -> None:
        # memory, CPU and wall time at 10k, 50k and 100k agents: flat memory means it
        # does not grow with N; agents / CPU s is the rate a free core would give
        for mark in CHECKPOINTS:
            if done >= mark and str(mark) not in marks:
                used = time.process_time() - cpu
                row = {
                    "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                    "cpu_s": round(used, 2),
                    "wall_s": round(time.perf_counter() - wall, 2),
                    "agents_per_cpu_s": round(mark / used),
                    "agents_per_wall_s": round(mark / (time.perf_counter() - wall)),
                }
                if traced:
                    row["tracemalloc_peak_mib"] = round(
                        tracemalloc.get_traced_memory()[1] / 2**20, 1
                    )
                    tracemalloc.reset_peak()
                marks[str(mark)] = row

    # the default LRU cache (1,024 states)
    async with StateStore(url, durability="group", **(options or {})) as store:
        if traced:
            tracemalloc.start()
        load = os.getloadavg()
        cpu, wall = time.process_time(), time.perf_counter()
        with RSS() as rss:
            report = await migrate(store, v2, check=False, on_progress=progress)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if traced:
            tracemalloc.stop()
        assert report.changed == n and not report.failed, report.failed[:3]
        vwall = time.perf_counter()
        checked = await migrate(store, v2, dry_run=True)
        vwall = time.perf_counter() - vwall
        assert checked.unchanged == n
    return {
        "agents": n,
        "agents_per_s": round(n / wall, 1),
        "agents_per_cpu_s": round(n / cpu),
        "cpu_s_per_1k": round(cpu / n * 1000, 3),
        "wall_s": round(wall, 2),
        "rescan_agents_per_s": round(n / vwall, 1),
        "loadavg_1_5_15_at_start": [round(x, 2) for x in load],
        "loadavg_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        "memory_at": marks,
        **rss.summary(),
    }


async def run_rollback_finalize(url: str, n: int, journal: str) -> dict[str, Any]:
    """CPU and wall time of a rollback of a migration of the ``n`` agents at ``url``,
    then of the finalize of a second migration (its ``migrate`` is not counted)."""
    from statekeeper.schema.migrate import finalize, rollback

    out: dict[str, Any] = {"agents": n}
    async with StateStore(url, durability="group") as store:
        await migrate(store, v2, check=False, journal=journal)
        cpu, wall = time.process_time(), time.perf_counter()
        back = await rollback(store, v2, journal=journal)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert back.changed == n and not back.failed
        out["rollback"] = {"agents_per_s": round(n / wall), "agents_per_cpu_s": round(n / cpu)}
        again = journal + ".again"  # a second run, its own journal
        await migrate(store, v2, check=False, journal=again)
        cpu, wall = time.process_time(), time.perf_counter()
        done = await finalize(store, v2, journal=again)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert done.released == n
        out["finalize"] = {"agents_per_s": round(n / wall), "agents_per_cpu_s": round(n / cpu)}
    out["loadavg_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def compare_with(ref: str, n: int, tmp: Path, *, rollback_finalize: bool = False) -> dict[str, Any]:
    """The same SQLite store (populated once, copied per run) migrated by this tree and
    by the code of git ref ``ref`` (``git archive``), each in its own process, one
    after the other in this run."""
    import shutil
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    archive = subprocess.run(
        ["git", "-C", str(here.parent), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    (tmp / "baseline").mkdir()
    subprocess.run(["tar", "-x", "-C", str(tmp / "baseline")], input=archive, check=True)
    template = tmp / "template.db"
    asyncio.run(populate(f"sqlite:///{template}", n))
    out: dict[str, Any] = {}
    for name, src in (("this tree", None), (ref, tmp / "baseline" / "src")):
        db = tmp / "run.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
            if Path(f"{template}{suffix}").exists():
                shutil.copyfile(f"{template}{suffix}", f"{db}{suffix}")
        first = f"sys.path.insert(0, {str(src)!r}); import statekeeper\n" if src else ""
        url, journal = f"sqlite:///{db}", str(tmp / "journal.json")
        call = (
            f"b.run_rollback_finalize({url!r}, {n}, {journal!r})"
            if rollback_finalize
            else f"b.run_migration({url!r}, {n}, populated=True)"
        )
        for stale in (journal, journal + ".again"):
            Path(stale).unlink(missing_ok=True)
        code = (
            "import asyncio, json, sys\n" + first + f"sys.path.insert(0, {str(here)!r})\n"
            "import bench_schema as b\n"
            f"r = asyncio.run({call})\n"
            "print(json.dumps(r))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    mine, base = out["this tree"], out[ref]
    if not rollback_finalize:
        out["cpu_ratio_this_tree_over_baseline"] = round(
            mine["cpu_s_per_1k"] / base["cpu_s_per_1k"], 3
        )
    return out


def plain_script_floor(path: Path, n: int) -> dict[str, Any]:
    """A hand-written migration of a plain (id, doc) table: no history, no checks."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, doc BLOB, v INTEGER)")
    conn.executemany(
        "INSERT INTO docs VALUES (?, ?, 1)",
        (
            (
                f"agent-{i:07d}",
                orjson.dumps({"customer_name": f"c{i}", "priority": "normal", "tags": []}),
            )
            for i in range(n)
        ),
    )
    conn.commit()
    cpu, wall = time.process_time(), time.perf_counter()
    rows = conn.execute("SELECT id, doc FROM docs WHERE v = 1").fetchall()
    batch = []
    for agent_id, doc in rows:
        batch.append((orjson.dumps(_up(orjson.loads(doc))), agent_id))
        if len(batch) == 1000:
            conn.executemany("UPDATE docs SET doc = ?, v = 2 WHERE id = ?", batch)
            conn.commit()
            batch = []
    conn.executemany("UPDATE docs SET doc = ?, v = 2 WHERE id = ?", batch)
    conn.commit()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    conn.close()
    return {"agents_per_s": round(n / wall, 1), "cpu_s_per_1k": round(cpu / n * 1000, 3)}


async def conversation_costs() -> list[dict[str, Any]]:
    rows = []
    async with StateStore("memory://", snapshot_every=10**6, snapshot_bytes=None) as store:
        for size in (10, 100, 1000):
            chat = Conversation()
            plain: dict[str, Any] = {"messages": []}
            for i in range(size):
                m = chat.add("user", f"message number {i} " * 4, tokens=12, created_at=1.0)
                plain["messages"].append(m.model_dump(mode="json"))
            typed = await store.agent(f"t-{size}", model=Conversation, initial_state=chat)
            untyped = await store.agent(f"u-{size}", initial_data=plain)
            rounds = 30
            cpu_t = time.process_time()
            for _ in range(rounds):
                m = typed.state.add("assistant", "one more message " * 4, tokens=9, created_at=2.0)
                await typed.save()
            cpu_t = time.process_time() - cpu_t
            cpu_u = time.process_time()
            for _ in range(rounds):
                untyped.data["messages"].append(m.model_dump(mode="json"))
                await untyped.save()
            cpu_u = time.process_time() - cpu_u
            (raw,) = await store.backend.read(f"t-{size}", 1, 2)
            (raw_u,) = await store.backend.read(f"u-{size}", 1, 2)
            rows.append(
                {
                    "messages": size,
                    "event_bytes_typed": len(raw.payload),
                    "event_bytes_untyped": len(raw_u.payload),
                    "cpu_ms_per_save_typed": round(cpu_t / rounds * 1000, 2),
                    "cpu_ms_per_save_untyped": round(cpu_u / rounds * 1000, 2),
                }
            )
    return rows


def governed_options() -> dict[str, Any]:
    """A store opened as an admin principal with an audit log (its own key): the
    migration writes one ``migrate`` entry per agent, a page's entries in one append."""
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring, generate_key

    return {
        "principal": "ops",
        "policy": parse_policy('[principals.ops]\nadmin = ["**"]\n'),
        "audit": Audit(keyring=Keyring({"a1": generate_key()})),
    }


def compare_governed(n: int, tmp: Path, rounds: int) -> dict[str, Any]:
    """The same migration of ``n`` agents on SQLite by a plain store and by a governed
    one (principal + policy + audit log), rounds alternating the order; each run
    migrates its own freshly populated store."""
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "governed": []}
    for r in range(rounds):
        order = ["plain", "governed"] if r % 2 == 0 else ["governed", "plain"]
        for name in order:
            url = f"sqlite:///{tmp}/{name}{r}.db"
            options = governed_options() if name == "governed" else None
            runs[name].append(asyncio.run(run_migration(url, n, options=options)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="5,000 agents")
    parser.add_argument("--postgres", metavar="DSN", default=None)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also trace Python allocations (slower)"
    )
    parser.add_argument("--no-conversation", action="store_true")
    parser.add_argument(
        "--baseline",
        metavar="GIT_REF",
        default=None,
        help="migrate the same SQLite store with this tree and with GIT_REF's code (only)",
    )
    parser.add_argument(
        "--rollback-finalize",
        action="store_true",
        help="with --baseline: time rollback and finalize instead of the migration",
    )
    parser.add_argument(
        "--governed",
        type=int,
        metavar="ROUNDS",
        default=0,
        help="(only) migrate on SQLite with a plain and a governed store (principal, "
        "policy, audit log: one entry per agent), ROUNDS rounds alternating the order",
    )
    args = parser.parse_args()
    n = 5000 if args.quick else args.n
    out: dict[str, Any] = {"machine": _common.machine("pydantic")}
    if args.governed:
        with tempfile.TemporaryDirectory() as tmp:
            runs = compare_governed(n, Path(tmp), args.governed)
        for name, rows in runs.items():
            cpu = [r["cpu_s_per_1k"] for r in rows]
            print(
                f"{name}: CPU s / 1k agents {statistics.median(cpu)} "
                f"({min(cpu)}..{max(cpu)}); agents/s wall "
                f"{[r['agents_per_s'] for r in rows]}; load "
                f"{[r['loadavg_1_5_15_at_start'] for r in rows]}"
            )
        ratios = [
            g["cpu_s_per_1k"] / p["cpu_s_per_1k"]
            for g, p in zip(runs["governed"], runs["plain"], strict=True)
        ]
        print(f"governed / plain CPU per agent: {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}..{max(ratios):.3f})")  # fmt: skip
        print(json.dumps({"machine": out["machine"], "runs": runs}))
        return
    if args.baseline and args.rollback_finalize:
        with tempfile.TemporaryDirectory() as tmp:
            out["sqlite"] = compare_with(args.baseline, n, Path(tmp), rollback_finalize=True)
        for name in ("this tree", args.baseline):
            r = out["sqlite"][name]
            print(
                f"{name}: rollback {r['rollback']['agents_per_s']:,} agents/s wall, "
                f"{r['rollback']['agents_per_cpu_s']:,}/CPU-s; finalize "
                f"{r['finalize']['agents_per_s']:,} agents/s wall, "
                f"{r['finalize']['agents_per_cpu_s']:,}/CPU-s; load at end "
                f"{r['loadavg_1_5_15_at_end']}"
            )
        print(json.dumps(out))
        return
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            out["sqlite"] = compare_with(args.baseline, n, Path(tmp))
        for name in ("this tree", args.baseline):
            r = out["sqlite"][name]
            marks = " ".join(
                f"{k}: {v['agents_per_cpu_s']:,}/CPU-s {v['agents_per_wall_s']:,}/s "
                f"{v['rss_mib']} MiB;"
                for k, v in r["memory_at"].items()
            )
            print(
                f"{name}: {r['agents_per_s']:,.0f} agents/s wall, "
                f"{r['agents_per_cpu_s']:,} agents/CPU-s ({r['cpu_s_per_1k']} CPU s/1k), "
                f"load {r['loadavg_1_5_15_at_start']} -> {r['loadavg_1_5_15_at_end']}; {marks}"
            )
        print(json.dumps(out))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out["sqlite"] = asyncio.run(
            run_migration(f"sqlite:///{tmp}/m.db", n, traced=args.tracemalloc)
        )
        out["plain_script_floor"] = plain_script_floor(Path(tmp) / "plain.db", n)
    if args.postgres:
        schema = f"sk_bench_schema_{os.getpid()}"
        out["postgres"] = asyncio.run(
            run_migration(f"{args.postgres}?schema={schema}", n, traced=args.tracemalloc)
        )
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    out["conversation"] = [] if args.no_conversation else asyncio.run(conversation_costs())
    s, f = out["sqlite"], out["plain_script_floor"]
    print(f"\n## Migration of {n:,} agents (v1 -> v2: a rename and a type change)\n")
    print("| engine | agents/s | CPU s / 1k agents | RSS first / last quarter (MiB) |")
    print("|---|---|---|---|")
    for name in ("sqlite", "postgres"):
        if name in out:
            r = out[name]
            print(
                f"| statekeeper {name} | {r['agents_per_s']:,.0f} | {r['cpu_s_per_1k']} | "
                f"{r['rss_first_quarter_mib']} / {r['rss_last_quarter_mib']} |"
            )
    print(f"| plain-table script (floor) | {f['agents_per_s']:,.0f} | {f['cpu_s_per_1k']} | - |")
    print(f"\nratio statekeeper sqlite / floor: {s['agents_per_s'] / f['agents_per_s']:.3f}")
    print("\n## Appending one message to a conversation\n")
    print("| messages | event bytes typed | untyped | CPU ms/save typed | untyped |")
    print("|---|---|---|---|---|")
    for r in out["conversation"]:
        print(
            f"| {r['messages']:,} | {r['event_bytes_typed']} | {r['event_bytes_untyped']} | "
            f"{r['cpu_ms_per_save_typed']} | {r['cpu_ms_per_save_untyped']} |"
        )
    print("\n" + json.dumps(out))


if __name__ == "__main__":
    main()
