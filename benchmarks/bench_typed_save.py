"""What a typed save costs over a plain save of the same document, and what reading the
stored state first (to carry the keys the model does not declare) cost.

Three sides, each saving the same states of the same agents, in the same run,
alternated round by round:

* ``plain``: ``store.save(agent, doc, schema_version=1)`` of the document the typed
  save writes (``doc`` made beforehand: the peer is the store's own save);
* ``typed``: ``TypedStates(store, Plan).save(agent, state)`` as it is now: the state
  validated and dumped, its undeclared keys carried onto the record the save itself
  writes on (``statekeeper.store.writes.SAVE_CARRY``: no read of its own);
* ``typed+read``: the previous code, written out here: ``store.get(agent)`` first (a
  validated cache hit: a head read on PostgreSQL), then the dump, the carry and
  ``store.save``.

Each save changes one field (a counter) of a ``Plan``: a title, a nested address (with
a key ``Plan`` does not declare) and 20 nested steps. The cache is warm (every agent
was written by the store). Reported: wall and process-CPU microseconds per save
(median of rounds), and per round the ratio to ``plain``, its spread min-max over
rounds.

``--agent-appends`` measures instead the CPU of a ``TypedAgent`` save that appends one
message to a 1,000-message ``Conversation`` (best of ``--rounds`` x 100 saves): run it
once per tree compared, ``PYTHONPATH=<tree>/src``.

Usage: ``.venv/bin/python benchmarks/bench_typed_save.py [--agents 200] [--rounds 5]
[--postgres postgresql://postgres@127.0.0.1:5432/test] [--agent-appends]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

from pydantic import BaseModel, Field

import _common
from statekeeper import StateStore
from statekeeper.schema import SchemaRegistry, TypedStates


class Address(BaseModel):
    city: str
    street: str = ""


class Step(BaseModel):
    name: str
    done: bool = False
    notes: str = ""


class Plan(BaseModel):
    title: str
    counter: int = 0
    address: Address
    steps: list[Step] = Field(default_factory=list)


SCHEMA = SchemaRegistry().register(Plan, name="plan", version=1)


def _plan(i: int, counter: int) -> Plan:
    return Plan(
        title=f"plan {i}",
        counter=counter,
        address=Address(city="Oslo", street=f"street {i}"),
        steps=[Step(name=f"step {k}", notes="x" * 40) for k in range(20)],
    )


async def _typed_with_read(store: StateStore, agent_id: str, state: Plan) -> None:
    """The previous TypedStates.save: read the stored state, carry, then save."""
    snap = await store.get(agent_id)
    doc = SCHEMA.dump(state, agent_id)
    if snap is not None:
        cast = SCHEMA.convert(snap.data, snap.schema_version or 1, agent_id=agent_id)
        doc = SCHEMA.adapter.keep(state, doc, cast, agent_id)
    await store.save(agent_id, doc, schema_version=1)


async def measure(url: str, agents: int, rounds: int) -> dict[str, Any]:
    sides = ("plain", "typed", "typed+read")
    per_save: dict[str, list[float]] = {s: [] for s in sides}
    cpu_save: dict[str, list[float]] = {s: [] for s in sides}
    ratios: dict[str, list[float]] = {s: [] for s in sides[1:]}
    cpu_ratios: dict[str, list[float]] = {s: [] for s in sides[1:]}
    async with StateStore(url) as store:
        typed = TypedStates(store, SCHEMA)
        ids = [f"agent-{i:04d}" for i in range(agents)]
        for i, agent_id in enumerate(ids):  # with a key Plan does not declare, nested
            doc = SCHEMA.dump(_plan(i, 0), agent_id)
            doc["address"]["floor"] = 3
            await store.save(agent_id, doc, schema_version=1)
        counter = 0
        for r in range(rounds):
            order = sides if r % 2 == 0 else tuple(reversed(sides))
            took: dict[str, float] = {}
            cpu: dict[str, float] = {}
            for side in order:
                counter += 1
                states = [_plan(i, counter) for i in range(agents)]
                docs = [SCHEMA.dump(s, a) for s, a in zip(states, ids, strict=True)]
                for d in docs:
                    d["address"]["floor"] = 3
                started, cpu_started = time.perf_counter(), time.process_time()
                if side == "plain":
                    for agent_id, doc in zip(ids, docs, strict=True):
                        await store.save(agent_id, doc, schema_version=1)
                elif side == "typed":
                    for agent_id, state in zip(ids, states, strict=True):
                        await typed.save(agent_id, state)
                else:
                    for agent_id, state in zip(ids, states, strict=True):
                        await _typed_with_read(store, agent_id, state)
                took[side] = (time.perf_counter() - started) / agents
                cpu[side] = (time.process_time() - cpu_started) / agents
            for side in sides:
                per_save[side].append(took[side])
                cpu_save[side].append(cpu[side])
            for side in sides[1:]:
                ratios[side].append(took[side] / took["plain"])
                cpu_ratios[side].append(cpu[side] / cpu["plain"])
        kept = (await store.load(ids[0])).data["address"].get("floor")
        assert kept == 3, "the nested undeclared key was not kept"
    return {
        "us_per_save": {s: statistics.median(v) * 1e6 for s, v in per_save.items()},
        "cpu_us_per_save": {s: statistics.median(v) * 1e6 for s, v in cpu_save.items()},
        "ratio": {s: (statistics.median(v), min(v), max(v)) for s, v in ratios.items()},
        "cpu_ratio": {s: (statistics.median(v), min(v), max(v)) for s, v in cpu_ratios.items()},
    }


async def agent_appends(messages: int, saves: int, rounds: int) -> float:
    """CPU microseconds per save of a TypedAgent whose Conversation grows by one message
    a save, from ``messages`` messages (the best of ``rounds``)."""
    from statekeeper.schema.structures import Conversation, Message

    schema = SchemaRegistry().register(Conversation, name="conversation", version=1)
    best = float("inf")
    async with StateStore("memory://") as store:
        first = Conversation(messages=[Message(role="user", content="hello " * 20)] * messages)
        agent = await store.agent("c", model=schema, initial_state=first)
        await agent.save()
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(saves):
                agent.state.messages.append(Message(role="user", content="one more"))
                await agent.save()
            best = min(best, (time.process_time() - started) / saves)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", metavar="DSN", default=None)
    parser.add_argument(
        "--agent-appends",
        action="store_true",
        help="only: CPU per save of a TypedAgent appending to a 1,000-message Conversation"
        " (run it with PYTHONPATH=<tree>/src for each tree compared)",
    )
    args = parser.parse_args()
    if args.agent_appends:
        us = asyncio.run(agent_appends(1000, 100, args.rounds))
        print(f"{_common.source_state()}: {us:.0f} us CPU per TypedAgent append-save")
        return
    load_before = os.getloadavg()[0]
    results: dict[str, dict[str, Any]] = {}
    results["memory"] = asyncio.run(measure("memory://", args.agents, args.rounds))
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = asyncio.run(
            measure(f"sqlite:///{tmp}/typed.db", args.agents, args.rounds)
        )
    if args.postgres:
        schema = f"sk_bench_typed_{os.getpid()}"
        sep = "&" if "?" in args.postgres else "?"
        try:
            results["postgres"] = asyncio.run(
                measure(f"{args.postgres}{sep}schema={schema}", args.agents, args.rounds)
            )
        finally:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    load_after = os.getloadavg()[0]
    print(_common.machine("pydantic"))
    print(f"load average (1 min): {load_before:.1f} -> {load_after:.1f}")
    for what, key, ratio in (
        ("wall", "us_per_save", "ratio"),
        ("CPU (process)", "cpu_us_per_save", "cpu_ratio"),
    ):
        rows = []
        for engine, res in results.items():
            us = res[key]
            cells = [engine, *(f"{us[s]:.0f}" for s in ("plain", "typed", "typed+read"))]
            for side in ("typed", "typed+read"):
                med, lo, hi = res[ratio][side]
                cells.append(f"{med:.2f} ({lo:.2f}-{hi:.2f})")
            rows.append(cells)
        print(f"\n{what}: us per save; ratio to plain, median (min-max) over rounds")
        print(
            _common.table(
                ["engine", "plain", "typed", "typed+read", "typed / plain", "typed+read / plain"],
                rows,
            )
        )


if __name__ == "__main__":
    main()
