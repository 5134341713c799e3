"""Instructions per save (issue 11): load-independent CPU of one save, side by side.

Wall time and even ``process_time`` are unreliable on a loaded machine; instruction
counts are not. Each side runs in a child process under ``valgrind --tool=callgrind``
twice, with ``--small`` and ``--large`` rounds of saves; the difference of the two
totals divided by the difference of the saves is the cost of one save in the steady
state (start-up, imports and warm-up cancel out). Every thread of the process is
counted (the SQLite writer thread included); SQLite runs with ``synchronous=OFF`` so
the kernel's fsync (not counted by callgrind anyway) plays no part.

Sides (chat states as in :mod:`bench_hotpath`: ~300-character messages, the history
growing by one message per save, each save a fresh ``{"messages": msgs[:n]}``):

- ``sk-seq``: ``StateStore.save``, ``durability="sync"``, one agent at a time;
- ``sk-seq-memory``: the same on ``memory://`` (the store's own cost, no engine);
- ``sk-seq-every1`` (not among the default sides): ``sk-seq`` with
  ``snapshot_every=1`` — every save carries its whole state as a snapshot;
- ``sk-seq-nopass``: ``sk-seq`` with ``sqlite.PASS_EVERY`` at 1 s: what a save costs
  when it skips its pass of the event loop (no other task ready, a pass made less than
  ``PASS_EVERY`` ago). Under valgrind a save takes longer than the default 1 ms, so in
  ``sk-seq`` every save still makes its pass; on a quiet machine most of a loop of
  saves skip it;
- ``sk-seq-postgres`` / ``sk-seq-postgres-keyed``: ``sk-seq`` on PostgreSQL
  (``$STATEKEEPER_BENCH_POSTGRES_DSN``, default the test server's
  ``postgresql://postgres@127.0.0.1:5432/test``; a schema of its own, dropped after),
  without and with a key: the client's instructions only (the server is another
  process); the once-per-store "encrypted" marker read (and set, keyed) cancels out
  of the per-save figure like the rest of the start-up;
- ``sk-agent``: ``DurableAgent.save`` of 4 agents, each save appending one message to
  ``agent.data["messages"]`` (tracked: the agent's ops are written as they are);
- ``lg-seq``: LangGraph ``SqliteSaver.put`` of the same states (the peer);
- ``bare``: one bare one-row commit (:class:`_common.BareCommits`, the floor);
- ``sk-group-N``: N agents saving concurrently (``asyncio.gather``),
  ``durability="group"``; ``sk-group-N-nowitness``: the same with ``witness=False``
  (the high-water witness flushes its file once a second: under valgrind a run's
  length decides how many flushes fall into it, which made ``sk-group-16`` counts
  of one tree differ by 4-7 %).

``--bytecodes`` instead counts, without valgrind, the Python bytecodes a steady-state
save executes per function (``sys.settrace`` with opcode events, event-loop thread;
deterministic: a profile that does not depend on the machine's load).

Run::

    .venv/bin/python benchmarks/bench_save_instructions.py              # all sides
    .venv/bin/python benchmarks/bench_save_instructions.py --sides sk-seq lg-seq
    .venv/bin/python benchmarks/bench_save_instructions.py --bytecodes sk-seq
    .venv/bin/python benchmarks/bench_save_instructions.py --bytecodes sk-group-16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BareCommits, Workload, lg_config, lg_open, lg_plan, table

CHARS = 300
FIRST = 10  # messages in the first state (as in bench_hotpath)
STEPS = 60  # the workload is built for this many steps in every run (its cost cancels)
SIDES = (
    "sk-seq",
    "sk-seq-nopass",
    "sk-seq-memory",
    "sk-seq-postgres",
    "sk-seq-postgres-keyed",
    "sk-agent",
    "lg-seq",
    "bare",
    "sk-group-16",
    "sk-group-64",
)


async def _sk_seq(path: Path, rounds: int, url: str | None = None, **options: Any) -> int:
    from statekeeper import StateStore

    wl = Workload(4, FIRST, FIRST + STEPS, chars=CHARS)
    async with StateStore(url or f"sqlite:///{path}?synchronous=OFF", **options) as store:
        docs = {a: wl.docs(a) for a in wl.agent_ids}
        for step in range(rounds):
            for a in wl.agent_ids:
                await store.save(a, docs[a][step])
    return 4 * rounds


async def _sk_agent(path: Path, rounds: int) -> int:
    from statekeeper import StateStore

    wl = Workload(4, FIRST, FIRST + STEPS, chars=CHARS)
    async with StateStore(f"sqlite:///{path}?synchronous=OFF") as store:
        agents = [
            await store.agent(a, initial_data={"messages": wl.messages[a][:FIRST]})
            for a in wl.agent_ids
        ]
        for step in range(rounds):
            for agent in agents:
                agent.data["messages"].append(wl.messages[agent.agent_id][FIRST + step])
                await agent.save()
    return 4 * rounds


def _lg_seq(path: Path, rounds: int) -> int:
    wl = Workload(4, FIRST, FIRST + STEPS, chars=CHARS)
    saver = lg_open(path, "OFF")
    try:
        plans = {a: lg_plan(saver, wl.docs(a)) for a in wl.agent_ids}
        configs = {a: lg_config(a) for a in wl.agent_ids}
        for step in range(rounds):
            for a in wl.agent_ids:
                cp, meta, versions = plans[a][step]
                configs[a] = saver.put(configs[a], cp, meta, versions)
    finally:
        saver.conn.close()
    return 4 * rounds


def _bare(path: Path, rounds: int) -> int:
    bare = BareCommits(path, "OFF", 500)
    try:
        for _ in range(rounds * 4):
            bare.commit()
    finally:
        bare.close()
    return rounds * 4


async def _sk_group(path: Path, rounds: int, agents: int, witness: bool = True) -> int:
    from statekeeper import StateStore

    wl = Workload(agents, FIRST, FIRST + STEPS, chars=CHARS)
    url = f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, durability="group", witness=None if witness else False) as store:
        docs = {a: wl.docs(a) for a in wl.agent_ids}

        async def run(a: str) -> None:
            for doc in docs[a][:rounds]:
                await store.save(a, doc)

        await asyncio.gather(*(run(a) for a in wl.agent_ids))
    return agents * rounds


def _sk_seq_postgres(path: Path, rounds: int, keyed: bool) -> int:
    import os
    import uuid

    import psycopg
    from psycopg import sql

    from statekeeper.security import Keyring, generate_key

    dsn = os.environ.get(
        "STATEKEEPER_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    )
    schema = "sk_bench_save_" + uuid.uuid4().hex[:12]
    options: dict[str, Any] = {"keyring": Keyring({"k1": generate_key()})} if keyed else {}
    try:
        return asyncio.run(_sk_seq(path, rounds, f"{dsn}?schema={schema}", **options))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def child(side: str, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        if side == "sk-seq":
            return asyncio.run(_sk_seq(path, rounds))
        if side == "sk-seq-nopass":
            from statekeeper.backends.sqlite import commits as sqlite
            from statekeeper.backends.sqlite import lone as sqlite_lone

            sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = 1.0
            return asyncio.run(_sk_seq(path, rounds))
        if side == "sk-seq-memory":
            return asyncio.run(_sk_seq(path, rounds, "memory://"))
        if side == "sk-seq-every1":
            return asyncio.run(_sk_seq(path, rounds, snapshot_every=1))
        if side.startswith("sk-seq-postgres"):
            return _sk_seq_postgres(path, rounds, keyed=side.endswith("-keyed"))
        if side == "sk-agent":
            return asyncio.run(_sk_agent(path, rounds))
        if side == "lg-seq":
            return _lg_seq(path, rounds)
        if side == "bare":
            return _bare(path, rounds)
        if side.startswith("sk-group-"):
            witness = not side.endswith("-nowitness")
            return asyncio.run(_sk_group(path, rounds, int(side.split("-")[2]), witness))
    raise SystemExit(f"unknown side {side}")


def instructions(side: str, rounds: int) -> tuple[int, int]:
    """(instructions of the whole child process, saves it made)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                side,
                str(rounds),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        saves = int(proc.stdout.strip().splitlines()[-1])
        total = sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", out.read_text(), re.M))
    return total, saves


def measure(side: str, small: int, large: int) -> dict[str, Any]:
    i1, s1 = instructions(side, small)
    i2, s2 = instructions(side, large)
    return {"per_save": (i2 - i1) / (s2 - s1), "saves": s2 - s1}


async def _bytecodes(side: str, path: Path, top: int) -> str:
    """Bytecodes per save, by function, of 20 steady-state rounds of ``side``."""
    import collections

    from statekeeper import StateStore

    counts: collections.Counter[tuple[str, str, int]] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename.rsplit("/", 1)[-1], code.co_name, code.co_firstlineno)] += 1
        return tracer

    if side == "sk-seq-nopass":
        from statekeeper.backends.sqlite import commits as sqlite
        from statekeeper.backends.sqlite import lone as sqlite_lone

        sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = 1.0
    agents = int(side.split("-")[2]) if side.startswith("sk-group-") else 4
    wl = Workload(agents, FIRST, FIRST + 30, chars=CHARS)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    durability = "group" if side.startswith("sk-group-") else "sync"
    url = "memory://" if side == "sk-seq-memory" else f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, durability=durability) as store:

        async def run(a: str, steps: slice) -> None:
            for doc in docs[a][steps]:
                await store.save(a, doc)

        async def rounds(steps: slice) -> None:
            if durability == "group":  # concurrently
                await asyncio.gather(*(run(a, steps) for a in wl.agent_ids))
                return
            for step in range(steps.start, steps.stop):  # one agent at a time
                for a in wl.agent_ids:
                    await run(a, slice(step, step + 1))

        await rounds(slice(0, 5))
        sys.settrace(tracer)
        await rounds(slice(5, 25))
        sys.settrace(None)
    saves = agents * 20
    lines = [f"{side}: {sum(counts.values()) / saves:,.0f} bytecodes per save (event loop)"]
    for (file, name, line), n in counts.most_common(top):
        lines.append(f"{n / saves:8.1f}  {file}:{line} {name}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "ROUNDS"))
    parser.add_argument("--sides", nargs="+", default=list(SIDES))
    parser.add_argument("--small", type=int, default=5)
    parser.add_argument("--large", type=int, default=STEPS)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--bytecodes", metavar="SIDE", help="bytecodes per save, by function")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.child:
        print(child(args.child[0], int(args.child[1])))
        return
    if args.bytecodes:
        with tempfile.TemporaryDirectory() as tmp:
            print(asyncio.run(_bytecodes(args.bytecodes, Path(tmp) / "bench.db", args.top)))
        return
    res = {side: measure(side, args.small, args.large) for side in args.sides}
    peer = res.get("lg-seq", {}).get("per_save")
    rows = []
    for side, r in res.items():
        ratio = f"{r['per_save'] / peer:.2f}x" if peer else "-"
        rows.append([side, f"{r['per_save']:,.0f}", r["saves"], ratio])
    print(table(["side", "instructions per save", "saves counted", "vs lg-seq"], rows))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
