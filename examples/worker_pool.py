"""A pool of worker processes sharing one store: claim agents with leases, process them
with durable steps, and recover the agents of a worker that died.

    python examples/worker_pool.py                          # 4 workers, one SQLite file
    python examples/worker_pool.py --workers 8 --agents 40 --crash-after 3
    python examples/worker_pool.py --url "postgresql://postgres@127.0.0.1/test?schema=pool"

What happens:

1. The parent seeds ``--agents`` agents, each with ``--units`` units of work to do.
2. It starts ``--workers`` processes. Each one loops over the agents and tries to take
   the lease of every unfinished one (``LeaseManager.try_acquire``: one conditional write
   per try). Holding a lease it starts a heartbeat, binds the agent to the lease (every
   write is fenced) and processes the units as durable steps, then releases the lease.
3. With ``--crash-after N`` the first worker kills itself with SIGKILL after N units,
   *while holding a lease*, without releasing it. The parent starts it alone and starts
   the others only once it has claimed an agent (it prints ``w0: claimed …``), so it
   always has work to crash in, however the processes are scheduled. Nobody can take
   that agent until the lease expires (``--ttl``); then another worker takes it over
   and continues from the recorded steps — units that were recorded are not done again.
4. The parent waits for the workers, then checks every agent: all units recorded, each
   exactly once, the work done in unit order; it exits 1 if anything is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager, Steps
from statekeeper.errors import LeaseLost


async def work_unit(agent_id: str, unit: int, worker: str) -> dict[str, Any]:
    """The real work of one unit (an LLM call, a tool call...). Here: a short sleep."""
    await asyncio.sleep(0.02)
    return {"unit": unit, "by": worker}


async def process(store: StateStore, leases: LeaseManager, agent_id: str, args: Any) -> int:
    """Process one claimed agent; returns how many units this worker did."""
    lease = await leases.try_acquire(agent_id)
    if lease is None:
        return 0  # someone else holds it (alive, or dead and not yet expired)
    done_here = 0
    if args.crash_after and args.name == "w0":
        print(f"{args.name}: claimed {agent_id}", flush=True)  # the parent waits for this
    lease.start_heartbeat()
    try:
        agent = await store.agent(agent_id, lease=lease)  # every write fenced by the lease
        if agent.data.get("status") == "done":
            return 0
        agent.data.setdefault("workers", []).append(leases.holder)  # who touched it
        await agent.save()
        steps = Steps(agent)
        for unit in range(agent.data["units"]):
            if await steps.recorded(f"unit-{unit}") is not None:
                continue  # done before (perhaps by a worker that died): not again
            agent.data["done"] = unit + 1  # committed together with the step's record
            await steps.run(f"unit-{unit}", work_unit, agent_id, unit, leases.holder)
            done_here += 1
            if args.crash_after and args.name == "w0" and done_here >= args.crash_after:
                print(f"{args.name}: crashing while holding {agent_id}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        agent.data["status"] = "done"
        await agent.save()
    except LeaseLost:
        # paused past the TTL and taken over: stop touching this agent
        print(f"{args.name}: lost the lease on {agent_id}", flush=True)
    finally:
        await lease.release()
    return done_here


async def worker(args: Any) -> None:
    async with StateStore(args.url) as store:
        leases = LeaseManager(store, holder=args.name, ttl=args.ttl)
        total = 0
        while True:
            pending = 0
            async for info in store.iter_agents():
                state = await store.get(info.agent_id)
                if state is None or state.data.get("status") == "done":
                    continue
                pending += 1
                total += await process(store, leases, info.agent_id, args)
            if pending == 0:
                break
            await asyncio.sleep(0.05)  # the rest are leased by others: look again soon
        print(json.dumps({"worker": args.name, "units": total}), flush=True)


async def seed(args: Any) -> None:
    async with StateStore(args.url) as store:
        for i in range(args.agents):
            await store.save(f"agent-{i:03d}", {"units": args.units, "done": 0})


async def check(args: Any) -> list[str]:
    problems: list[str] = []
    async with StateStore(args.url) as store:
        for i in range(args.agents):
            agent_id = f"agent-{i:03d}"
            state = await store.load(agent_id)
            recorded = await Steps(store, agent_id).results()
            expected = [f"unit-{u}" for u in range(args.units)]
            if list(recorded) != expected:
                problems.append(f"{agent_id}: recorded {list(recorded)}")
            if state.data.get("status") != "done" or state.data["done"] != args.units:
                problems.append(f"{agent_id}: not finished: {state.data}")
            workers = state.data.get("workers", [])
            if len(workers) > 1:
                print(f"{agent_id}: recovered, worked on by {' -> '.join(workers)}")
        report = await store.verify()
        if not report.ok:
            problems.extend(str(p) for p in report.problems)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="sqlite:///worker_pool.db")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--units", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=2.0, help="lease TTL in seconds")
    parser.add_argument("--crash-after", type=int, default=2, help="0: nobody crashes")
    parser.add_argument("--name", help=argparse.SUPPRESS)  # set in worker processes
    args = parser.parse_args()
    if args.name:
        asyncio.run(worker(args))
        return 0
    if args.url.startswith("sqlite:///") and os.path.exists(args.url[len("sqlite:///") :]):
        os.remove(args.url[len("sqlite:///") :])
    asyncio.run(seed(args))
    started = time.perf_counter()
    common = ["--url", args.url, "--ttl", str(args.ttl), "--crash-after", str(args.crash_after)]
    first: dict[str, Any] = {"stdout": subprocess.PIPE, "text": True} if args.crash_after else {}
    procs = [subprocess.Popen([sys.executable, __file__, *common, "--name", "w0"], **first)]
    if args.crash_after:
        # the worker meant to crash must hold a lease before the others take every agent
        assert procs[0].stdout is not None
        for line in procs[0].stdout:
            print(line, end="", flush=True)
            if line.startswith("w0: claimed"):
                break
    procs += [
        subprocess.Popen([sys.executable, __file__, *common, "--name", f"w{n}"])
        for n in range(1, args.workers)
    ]
    if args.crash_after:
        rest, _ = procs[0].communicate()
        print(rest, end="", flush=True)
    codes = [p.wait() for p in procs]
    crashed = [f"w{n}" for n, c in enumerate(codes) if c == -signal.SIGKILL]
    print(f"workers finished in {time.perf_counter() - started:.1f}s; crashed: {crashed or 'none'}")
    if any(c not in (0, -signal.SIGKILL) for c in codes):
        print(f"a worker failed: exit codes {codes}")
        return 1
    problems = asyncio.run(check(args))
    for problem in problems:
        print("PROBLEM", problem)
    print("OK: every unit of every agent recorded exactly once" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
