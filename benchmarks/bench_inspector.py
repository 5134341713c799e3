"""The inspector's agents list on a store of one million agents, SQLite and PostgreSQL.

Issue 18's target: p95 page render under 100 ms. Each request goes through the whole
ASGI app in-process (token check, routing, the store reads, Jinja2 rendering, the
security headers) with httpx's ASGI transport: what a browser waits for minus the
socket. Scenarios (50 rows a page):

* ``first page``      ``/agents``
* ``deep page``       ``/agents?after=<random id>``          (keyset: any depth)
* ``backwards``       ``/agents?sort=desc&after=<random id>``
* ``prefix``          ``/agents?q=t3/agent-01234``           (a random 5-digit prefix)
* ``namespace``       ``/agents?ns=t7&after=<random id>``
* ``state filter``    ``/agents?state=completed&after=<random id>`` (decodes heads)
* ``rare filter``     ``/agents?active=1h``  (nothing matches: the page stops at its scan
  budget and offers to continue; bounded, never a full scan)
* ``agent page``      ``/agent?id=<random id>``
* ``by last write``   ``/agents?sort=recent`` (newest write first, the last-write index)
* ``by last write, deep`` ``/agents?sort=recent&after=<random id>&at=<its last write>``

Side by side in the same run, the usual alternative the keyset design replaces: one
page at the same random depths by ``LIMIT 50 OFFSET k`` and by keyset
(``WHERE agent_id > …``), both straight in SQL (the query alone, no rendering), so the
ratio shows what OFFSET pagination would cost at depth.

Stores: 1M agents of 2-3 events each (``created``, ``start_processing``, and for every
other agent ``complete``), ids ``t<k>/agent-<7 digits>`` (ten namespaces), the bodies
the real store wrote sealed again for each agent (the hash chain names the agent),
inserted by
``append_batch``; built once (SQLite under ``.bench/``, PostgreSQL in schema
``bench_inspector``) and reused. Run::

    .venv/bin/python benchmarks/bench_inspector.py                # 1M, both engines
    .venv/bin/python benchmarks/bench_inspector.py --agents 100000 --engines sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, machine, percentile, table
from statekeeper import StateStore, StateTransition
from statekeeper.backends.base import Backend
from statekeeper.codec import ZERO_LINK, Codec
from statekeeper.records import AppendRequest, RawEvent

BENCH_DIR = ROOT / ".bench"
PG_DSN = os.environ.get("STATEKEEPER_BENCH_PG", "postgresql://127.0.0.1:5432/test")
PG_SCHEMA = "bench_inspector"
BATCH = 2000
TOKEN = "bench-token-0123456789abcdef"


def agent_id(i: int) -> str:
    return f"t{i % 10}/agent-{i:07d}"


async def templates() -> tuple[list[RawEvent], list[RawEvent]]:
    """Events as StateStore writes them: an agent still processing, one completed."""
    async with StateStore("memory://") as store:
        for name, done in (("open", False), ("done", True)):
            agent = await store.agent(name)
            agent.data["task"] = "summarise the quarterly report"
            await agent.transition(StateTransition.START_PROCESSING, actor="worker-1")
            if done:
                agent.data["answer"] = "revenue grew 4%"
                await agent.transition(StateTransition.COMPLETE, actor="worker-2")
        return await store.backend.read("open"), await store.backend.read("done")


def sealed_events(
    codec: Codec, aid: str, i: int, templates: tuple[list[RawEvent], list[RawEvent]]
) -> list[RawEvent]:
    """The template's bodies sealed for agent ``aid`` (the hash chain names the agent)."""
    events = []
    prev = ZERO_LINK
    for e in templates[1] if i % 2 else templates[0]:
        sealed = codec.seal(aid, e.seq, e.type, e.timestamp, e.payload[35:], prev)
        events.append(RawEvent(e.seq, e.type, e.timestamp, sealed[0], sealed[1]))
        prev = sealed[2]
    return events


async def fill(backend: Backend, n: int, log: Any) -> None:
    codec = Codec()
    tmpl = await templates()
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        requests = [
            AppendRequest(agent_id(i), 0, tuple(sealed_events(codec, agent_id(i), i, tmpl)))
            for i in range(start, min(n, start + BATCH))
        ]
        results = await backend.append_batch(requests)
        bad = [r for r in results if isinstance(r, BaseException)]
        if bad:
            raise RuntimeError(f"bulk insert failed: {bad[0]!r}")
        if start and start % 200_000 == 0:
            log(f"  {start:,} agents, {time.perf_counter() - t0:.0f} s")
    log(f"  built {n:,} agents in {time.perf_counter() - t0:.0f} s")


async def sqlite_store(n: int, log: Any) -> str:
    from statekeeper.backends.sqlite import SQLiteBackend

    BENCH_DIR.mkdir(exist_ok=True)
    path = BENCH_DIR / f"inspector-{n}.db"
    if path.exists():
        backend = SQLiteBackend(path)
        try:
            if await backend.count_agents() == n:
                log(f"reusing {path}")
                return f"sqlite:///{path}"
        finally:
            await backend.close()
    tmp = path.with_name(path.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)  # noqa: ASYNC240 - setup, untimed
    log(f"building {path} ({n:,} agents)")
    backend = SQLiteBackend(tmp, synchronous="OFF")
    try:
        await fill(backend, n, log)
    finally:
        await backend.close()
    os.replace(tmp, path)
    return f"sqlite:///{path}"


async def postgres_store(n: int, log: Any) -> str:
    from statekeeper.backends.postgres import PostgresBackend

    schema = f"{PG_SCHEMA}_{n}"
    backend = PostgresBackend(PG_DSN, schema=schema, max_size=4)
    try:
        if await backend.count_agents() == n:
            log(f"reusing schema {schema}")
            return f"{PG_DSN}?schema={schema}"
        await backend.drop_all()
        await backend.initialize()
    finally:
        await backend.close()
    log(f"building schema {schema} ({n:,} agents, COPY)")
    await copy_fill(schema, n, log)
    return f"{PG_DSN}?schema={schema}"


async def copy_fill(schema: str, n: int, log: Any) -> None:
    """Bulk load by COPY into the tables the backend created (setup only: what the
    backend's own append writes, row for row, without a million round trips)."""
    import psycopg

    codec = Codec()
    tmpl = await templates()
    t0 = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(PG_DSN) as conn:
        async with conn.cursor() as cur:
            async with cur.copy(
                f"COPY {schema}.sk_events (agent_id, seq, kind, ts, payload, checksum) FROM STDIN"
            ) as copy:
                for i in range(n):
                    aid = agent_id(i)
                    for e in sealed_events(codec, aid, i, tmpl):
                        await copy.write_row(
                            (aid, e.seq, e.type, e.timestamp, e.payload, e.checksum)
                        )
            async with cur.copy(
                f"COPY {schema}.sk_agents (agent_id, head_seq, created_at, updated_at) FROM STDIN"
            ) as copy:
                for i in range(n):
                    events = tmpl[1] if i % 2 else tmpl[0]
                    await copy.write_row(
                        (agent_id(i), events[-1].seq, events[0].timestamp, events[-1].timestamp)
                    )
        await conn.commit()
        await conn.execute(f"ANALYZE {schema}.sk_agents")
        await conn.execute(f"ANALYZE {schema}.sk_events")
        await conn.commit()
    log(f"  loaded {n:,} agents in {time.perf_counter() - t0:.0f} s")


async def timed(client: Any, url: str) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    r = await client.get(url)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if r.status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
    return wall, cpu


_ROWS = "SELECT agent_id, head_seq, created_at, updated_at FROM {t}"
_OFFSET = _ROWS + " ORDER BY agent_id LIMIT 50 OFFSET {p}"
_KEYSET = _ROWS + " WHERE agent_id > {p} ORDER BY agent_id LIMIT 50"


async def sql_page(url: str, offset: bool, k: int) -> float:
    """One page of index rows straight in SQL, by OFFSET ``k`` or keyset after the
    ``k``-th id (the query alone: no decoding, no rendering), wall seconds."""
    template = _OFFSET if offset else _KEYSET
    arg: Any = k if offset else agent_id(k)
    if url.startswith("sqlite"):
        import sqlite3

        def go() -> float:
            db = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
            t0 = time.perf_counter()
            db.execute(template.format(t="sk_agents", p="?"), (arg,)).fetchall()
            took = time.perf_counter() - t0
            db.close()
            return took

        return await asyncio.to_thread(go)
    import psycopg

    dsn, _, schema = url.partition("?schema=")
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        t0 = time.perf_counter()
        cur = await conn.execute(template.format(t=f"{schema}.sk_agents", p="%s"), (arg,))
        await cur.fetchall()
        return time.perf_counter() - t0


async def measure(url: str, n: int, rounds: int, seed: int) -> dict[str, Any]:
    import httpx

    from statekeeper.inspector import InspectorSettings, create_app

    rng = random.Random(seed)
    settings = InspectorSettings(url=url, token=TOKEN)
    app = create_app(settings)

    def after() -> str:
        return agent_id(rng.randrange(n))

    def page(**params: Any) -> str:
        return "/agents?" + urlencode(params) if params else "/agents"

    scenarios: dict[str, Any] = {
        "first page": lambda: page(),
        "deep page": lambda: page(after=after()),
        "backwards": lambda: page(sort="desc", after=after()),
        "prefix": lambda: page(q=f"t{rng.randrange(10)}/agent-{rng.randrange(100000):05d}"),
        "namespace": lambda: page(ns=(a := after()).split("/")[0], after=a),
        "state filter": lambda: page(state="completed", after=after()),
        "rare filter": lambda: page(active="1h", after=after()),
        "agent page": lambda: "/agent?" + urlencode({"id": after()}),
        "by last write": lambda: page(sort="recent"),
        "by last write, deep": lambda: page(sort="recent", **cursors.pop()),
    }
    out: dict[str, Any] = {}
    # cursors of deep "by last write" pages: (last write, id) of random agents
    cursors: list[dict[str, str]] = []
    async with StateStore(url) as store:
        for _ in range(rounds + 5):
            (info,) = await store.list_agents(after=after(), limit=1)
            cursors.append({"after": info.agent_id, "at": repr(info.updated_at)})
    async with app.app.router.lifespan_context(app.app):  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client:
            for make in scenarios.values():
                for _ in range(5):  # warm the caches and the prepared statements
                    await timed(client, make())
            samples: dict[str, list[tuple[float, float]]] = {k: [] for k in scenarios}
            for _ in range(rounds):  # interleaved: load on the machine hits all alike
                for name, make in scenarios.items():
                    samples[name].append(await timed(client, make()))
    offsets: list[float] = []
    keysets: list[float] = []
    for _ in range(max(5, rounds // 4)):  # the same random depths for both
        k = rng.randrange(n - 50)
        offsets.append(await sql_page(url, True, k))
        keysets.append(await sql_page(url, False, k))
    for name, rows in samples.items():
        walls = [w for w, _ in rows]
        cpus = [c for _, c in rows]
        out[name] = {
            "p50_ms": percentile(walls, 50) * 1000,
            "p95_ms": percentile(walls, 95) * 1000,
            "p99_ms": percentile(walls, 99) * 1000,
            "cpu_p50_ms": percentile(cpus, 50) * 1000,
            "cpu_p95_ms": percentile(cpus, 95) * 1000,
            "n": len(walls),
        }
    for name, walls in (("SQL only: keyset", keysets), ("SQL only: OFFSET", offsets)):
        out[name] = {
            "p50_ms": percentile(walls, 50) * 1000,
            "p95_ms": percentile(walls, 95) * 1000,
            "p99_ms": percentile(walls, 99) * 1000,
            "cpu_p50_ms": float("nan"),
            "cpu_p95_ms": float("nan"),
            "n": len(walls),
        }
    return out


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine("starlette", "jinja2", "httpx")}
    for engine in args.engines.split(","):
        if engine == "sqlite":
            url = await sqlite_store(args.agents, log)
        elif engine == "postgres":
            url = await postgres_store(args.agents, log)
        else:
            raise SystemExit(f"unknown engine {engine!r}")
        log(f"measuring {engine}: {args.rounds} rounds")
        results[engine] = await measure(url, args.agents, args.rounds, args.seed)
        rows = [
            [
                name,
                f"{r['p50_ms']:.1f}",
                f"{r['p95_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['cpu_p50_ms']:.1f}",
                "yes" if r["p95_ms"] < 100 else "NO",
            ]
            for name, r in results[engine].items()
        ]
        keyset = results[engine]["SQL only: keyset"]["p50_ms"]
        offset = results[engine]["SQL only: OFFSET"]["p50_ms"]
        print(f"\n{engine}, {args.agents:,} agents, {args.rounds} requests per scenario")
        print(table(["scenario", "p50 ms", "p95 ms", "p99 ms", "CPU p50 ms", "p95 < 100 ms"], rows))
        print(
            f"one page at a random depth, the query alone: keyset p50 {keyset:.2f} ms, "
            f"OFFSET p50 {offset:.2f} ms (OFFSET/keyset = {offset / keyset:.0f}x)"
        )
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = asyncio.run(amain(args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
