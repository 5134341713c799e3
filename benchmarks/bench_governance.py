"""What governance costs (issue 15): a store without a policy vs one with a policy, vs
one with a policy and an audit log, in the same process, rounds alternating the order.

1. ``--mode compare`` (default): per-save and per-load time on memory and SQLite
   (``durability="sync"``) for three stores over the same engine kind: plain
   ``StateStore`` (no principal: the unmodified class), governed (principal + policy),
   governed + audited (every save appends an audit entry). Medians with min..max over
   rounds and ratios to the plain store from the same round.
2. ``--mode count --tree SRC``: the instructions (callgrind) of N saves and N loads of a
   plain store, minus those of the same process with N=0, with ``SRC`` first on the
   import path: run it with this branch's ``src`` and main's ``src`` to compare the
   ungoverned hot path of two trees exactly (no timing noise)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/bench_governance.py --mode count --tree src --ops 2000

3. ``--mode verify``: what ``audit verify`` costs on SQLite, CPU seconds per 1,000
   entries (``time.process_time``), for logs of ``--entries`` sizes built once each
   (saves over ``--agents`` agents, a snapshot every 25th operation, a delete every
   100th, a tenth of the agents written before the log began); each round measures,
   alternating the order, reading and authenticating every entry (``entries()``, the
   chain alone), the full ``verify()`` (chain, head, and every check against the
   store) and, of it, the check of the events no entry claims alone::

    .venv/bin/python benchmarks/bench_governance.py --mode verify --entries 1000,10000

Run::

    .venv/bin/python benchmarks/bench_governance.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

POLICY = """
[principals.app]
write = ["tenant/**"]
[principals.ops]
admin = ["**"]
"""


async def _run(store: Any, saves: int, agents: int) -> tuple[float, float]:
    ids = [f"tenant/team/a{i}" for i in range(agents)]
    start = time.perf_counter()
    for i in range(saves):
        await store.save(ids[i % agents], {"n": i, "note": "x" * 200})
    mid = time.perf_counter()
    for i in range(saves):
        await store.load(ids[i % agents])
    end = time.perf_counter()
    return (mid - start) / saves, (end - mid) / saves


async def _run_changes(store: Any, ops: int, workload: str) -> None:
    """``delete``: each op saves a new agent, then deletes it; ``snapshot``: each op
    saves one of 20 agents, then stores a snapshot of it; ``lease``: each op takes the
    lease of one of 20 agents and releases it."""
    if workload == "lease":
        from statekeeper.concurrency import LeaseManager

        manager = LeaseManager(store, holder="bench", ttl=300)
        for i in range(ops):
            lease = await manager.acquire(f"tenant/team/a{i % 20}")
            await lease.release()
        return
    for i in range(ops):
        agent = f"tenant/team/d{i}" if workload == "delete" else f"tenant/team/a{i % 20}"
        await store.save(agent, {"n": i, "note": "x" * 200})
        if workload == "delete":
            await store.delete(agent)
        else:
            await store.snapshot(agent)


async def compare(rounds: int, saves: int) -> None:
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring, generate_key

    policy = parse_policy(POLICY)
    keyring = Keyring({"k1": generate_key()})
    kinds = {
        "plain": {},
        "policy": {"principal": "app", "policy": policy},
        "policy+audit": {"principal": "app", "policy": policy, "audit": Audit()},
    }
    for engine in ("memory", "sqlite"):
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        with tempfile.TemporaryDirectory() as folder:
            for r in range(rounds):
                order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
                for name in order:
                    url = "memory://" if engine == "memory" else f"sqlite:///{folder}/{name}{r}.db"
                    store = StateStore(url, keyring=keyring, witness=False, **kinds[name])
                    try:
                        results[name].append(await _run(store, saves, 20))
                    finally:
                        await store.close()
        print(f"\n{engine}: {saves} saves then {saves} loads of 20 agents, {rounds} rounds")
        print(f"{'store':<14}{'save µs (min..max)':>26}{'load µs (min..max)':>26}"
              f"{'save ratio':>12}{'load ratio':>12}")  # fmt: skip
        for name, runs in results.items():
            s = [x[0] * 1e6 for x in runs]
            ld = [x[1] * 1e6 for x in runs]
            rs = [a[0] / b[0] for a, b in zip(runs, results["plain"], strict=True)]
            rl = [a[1] / b[1] for a, b in zip(runs, results["plain"], strict=True)]
            print(
                f"{name:<14}{statistics.median(s):>10.1f} ({min(s):.1f}..{max(s):.1f})"
                f"{statistics.median(ld):>12.1f} ({min(ld):.1f}..{max(ld):.1f})"
                f"{statistics.median(rs):>10.2f}x{statistics.median(rl):>11.2f}x"
            )


async def count(ops: int, kind: str, engine: str = "memory", workload: str = "save") -> None:
    from statekeeper import StateStore

    options: dict[str, Any] = {}
    if kind != "plain":
        from statekeeper.governance import Audit, parse_policy
        from statekeeper.security import Keyring

        options = {"principal": "app", "policy": parse_policy(POLICY)}
        if kind in ("audit", "keyed"):
            options["keyring"] = Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
            options["audit"] = Audit()
        if kind == "keyed":  # the baseline of "audit": a plain store with the same key
            options = {"keyring": options["keyring"]}
    with tempfile.TemporaryDirectory() as folder:
        url = "memory://" if engine == "memory" else f"sqlite:///{folder}/count.db"
        if engine == "redis":  # a prefix of its own on $STATEKEEPER_BENCH_REDIS_URL
            server = os.environ.get("STATEKEEPER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
            url = f"{server}?prefix=bench-governance-{os.getpid()}:"
        store = StateStore(url, witness=False, **options)
        try:
            if ops and workload == "save":
                await _run(store, ops, 20)
            elif ops:
                await _run_changes(store, ops, workload)
        finally:
            if engine == "redis":
                await store.backend.drop_all()
            await store.close()


async def _build_log(url: str, entries: int, agents: int) -> int:
    """A store at ``url`` whose audit log holds about ``entries`` entries; the count."""
    from statekeeper import StateStore
    from statekeeper.governance import Audit, AuditLog, parse_policy
    from statekeeper.security import Keyring

    keyring = Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
    ids = [f"tenant/team/a{i}" for i in range(agents)]
    plain = StateStore(url, keyring=keyring, witness=False)
    try:
        for agent in ids[: max(1, agents // 10)]:  # written before the log began
            for n in range(3):
                await plain.save(agent, {"n": n, "note": "x" * 200})
    finally:
        await plain.close()
    store = StateStore(
        url,
        keyring=keyring,
        principal="ops",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )
    try:
        i = 0
        log = AuditLog(store.backend, keyring)
        while (await log.backend.head("\x01sk-audit/log")) < entries:
            agent = ids[i % agents]
            await store.save(agent, {"n": i, "note": "x" * 200})
            if i % 25 == 24:
                await store.snapshot(agent)
            if i % 100 == 99:
                await store.delete(agent)
            i += 1
        return await log.backend.head("\x01sk-audit/log")
    finally:
        await store.close()


async def _measure(url: str, what: str) -> float:
    """CPU seconds of reading every entry (``chain``) or of ``verify()``."""
    from statekeeper.backends.url import open_backend
    from statekeeper.governance import AuditLog
    from statekeeper.security import Keyring

    backend = open_backend(url)
    try:
        log = AuditLog(backend, Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}))
        await backend.head("tenant/team/a0")  # opened before the clock starts
        start = time.process_time()
        if what == "chain":
            async for _ in log.entries():
                pass
        elif what == "unclaimed":  # the check of live agents' events alone
            from statekeeper.governance.audit_checks import StoreChecks
            from statekeeper.governance.audit_claims import unclaimed_events

            checks = StoreChecks()
            async for entry in log.entries():
                checks.see(entry)
            start = time.process_time()
            assert await unclaimed_events(backend, checks) == []
        else:
            report = await log.verify()
            assert report.ok, report.problems
        return time.process_time() - start
    finally:
        await backend.close()


async def verify_cost(sizes: list[int], agents: int, rounds: int) -> None:
    print(
        f"audit verify on SQLite, CPU seconds per 1,000 entries ({agents} agents, {rounds} rounds)"
    )
    print(
        f"{'entries':>8} {'chain only':>22} {'verify':>22} {'verify / chain':>22}"
        f" {'of which unclaimed':>22}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            url = f"sqlite:///{folder}/verify-{size}.db"
            n = await _build_log(url, size, agents)
            got: dict[str, list[float]] = {"chain": [], "verify": [], "unclaimed": []}
            ratios = []
            for r in range(rounds):
                order = ["chain", "verify", "unclaimed"]
                order = order if r % 2 == 0 else order[::-1]
                this = {what: await _measure(url, what) for what in order}
                for what, cpu in this.items():
                    got[what].append(cpu * 1000 / n)
                ratios.append(this["verify"] / this["chain"])

            def cell(values: list[float], unit: str = "") -> str:
                mid = statistics.median(values)
                return f"{mid:.3f}{unit} ({min(values):.3f}-{max(values):.3f})"

            print(
                f"{n:>8} {cell(got['chain']):>22} {cell(got['verify']):>22} "
                f"{cell(ratios, 'x'):>22} {cell(got['unclaimed']):>22}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["compare", "count", "verify"], default="compare")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 300 saves")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=1000)
    parser.add_argument("--tree", help="(count) a src folder put first on the import path")
    parser.add_argument("--ops", type=int, default=2000, help="(count) saves and loads")
    parser.add_argument(
        "--kind",
        choices=["plain", "policy", "keyed", "audit"],
        default="plain",
        help="(count) plain store, with a policy, with a key, with a key + policy + audit",
    )
    parser.add_argument(
        "--engine",
        choices=["memory", "sqlite", "redis"],
        default="memory",
        help="(count) the store's engine (sqlite: durability sync, one commit per save; "
        "redis: $STATEKEEPER_BENCH_REDIS_URL, default the local server, a prefix of its own)",
    )
    parser.add_argument(
        "--workload",
        choices=["save", "delete", "snapshot", "lease"],
        default="save",
        help="(count) save: N saves + N loads; delete: N times save a new agent and delete "
        "it; snapshot: N times save and snapshot; lease: N times take a lease and release it",
    )
    parser.add_argument(
        "--entries", default="1000,10000", help="(verify) log sizes, comma-separated"
    )
    parser.add_argument("--agents", type=int, default=200, help="(verify) agents written")
    args = parser.parse_args()
    if args.mode == "verify":
        sizes = [int(x) for x in args.entries.split(",")]
        asyncio.run(verify_cost(sizes, args.agents, args.rounds))
        return
    if args.mode == "count":
        if args.tree:
            sys.path.insert(0, str(Path(args.tree).resolve()))
        asyncio.run(count(args.ops, args.kind, args.engine, args.workload))
        return
    if args.quick:
        args.rounds, args.saves = 3, 300
    asyncio.run(compare(args.rounds, args.saves))


if __name__ == "__main__":
    main()
