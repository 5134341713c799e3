"""Child processes for the multi-process concurrency tests (real processes, real kills).

Usage: ``python _workers.py COMMAND URL ...`` — every command prints ``ready``, waits
for a line on stdin (so that all children start together), then works and prints one
JSON line with what it did.

rmw URL NAME COUNT AGENT...
    COUNT read-modify-write increments with :func:`statekeeper.concurrency.update`
    (default arguments), one at a time, round-robin over the agents: ``n += 1`` and
    ``by[NAME] += 1``.
hammer URL NAME COUNT TASKS AGENT
    COUNT increments of one AGENT with :func:`statekeeper.concurrency.update` and its
    DEFAULT arguments, issued by TASKS concurrent asyncio tasks; a
    ``RetriesExhausted`` is counted (not fatal). Reports attempts, exhausted calls
    and seconds.
holder URL AGENT TTL
    Acquires AGENT's lease (with a heartbeat), makes 3 fenced writes, prints
    ``pause-point`` and waits for a line on stdin (the parent SIGSTOPs it there, past
    the TTL, SIGCONTs it after another worker took over and then sends the line), then
    tries 5 late fenced writes
    through the store and 2 through a lease-bound DurableAgent; reports how each ended.
taker URL AGENT TTL
    Acquires AGENT's lease (waiting for it) and makes 5 fenced writes.
step-holder URL AGENT TTL
    ``holder`` with durable steps fenced by the lease: records steps 1..3, pauses at
    ``pause-point`` like ``holder``, then runs step 4 (the taker recorded it) and step
    9 (nobody did); reports how each ended and which effects ran after the pause.
step-taker URL AGENT TTL
    Acquires AGENT's lease (waiting for it) and runs steps 1..6 fenced by it.
steps URL AGENT LOG STEPS [PAUSE]
    Runs durable steps 1..STEPS; the side effect of step k appends ``k`` to LOG
    (fsync'ed). PAUSE = ``before:k`` | ``inside:k`` | ``after-effect:k`` prints
    ``at PAUSE`` at that point and sleeps until killed; ``slow`` sleeps 20 ms before
    and after each effect.
keyed URL NAME LOG COUNT AGENT...
    COUNT keyed updates ``op-0`` .. ``op-(COUNT-1)`` (``op-i`` on AGENT ``i % len``),
    starting at a place NAME picks and wrapping round, so that several workers (and
    the replacements of killed ones) retry the same operations as crashed clients do:
    ``update(..., idempotency_key="op-i")`` appends ``op-i`` to ``keys`` and adds 1 to
    ``n``; each acknowledged one is logged as one line ``op-i`` (one ``write(2)`` on an
    ``O_APPEND`` file: a SIGKILL never leaves half a line).
sync-steps URL AGENT LOG STEPS [PAUSE]
    ``steps`` from sync code: a ``SyncStateStore`` and ``SyncSteps``, the same effects
    and pause points.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from statekeeper import StateStore, SyncStateStore
from statekeeper.concurrency import LeaseManager, Steps, SyncSteps, update
from statekeeper.errors import LeaseLost, RetriesExhausted


def say(*parts: object) -> None:
    print(*parts, flush=True)


def wait_for_go() -> None:
    say("ready")
    sys.stdin.readline()


async def rmw(url: str, name: str, count: int, agents: list[str]) -> None:
    async with StateStore(url) as store:
        wait_for_go()
        started = time.perf_counter()
        attempts = 0

        def bump(data: dict[str, Any]) -> None:
            data["n"] = data.get("n", 0) + 1
            by = data.setdefault("by", {})
            by[name] = by.get(name, 0) + 1

        for i in range(count):
            done = await update(store, agents[i % len(agents)], bump)  # default budget
            attempts += done.attempts
        say(json.dumps({"attempts": attempts, "seconds": time.perf_counter() - started}))


async def hammer(url: str, name: str, count: int, tasks: int, agent: str) -> None:
    async with StateStore(url) as store:
        wait_for_go()
        started = time.perf_counter()
        attempts = exhausted = done = 0

        def bump(data: dict[str, Any]) -> None:
            data["n"] = data.get("n", 0) + 1
            by = data.setdefault("by", {})
            by[name] = by.get(name, 0) + 1

        async def task(share: int) -> None:
            nonlocal attempts, exhausted, done
            for _ in range(share):
                try:
                    result = await update(store, agent, bump)  # the documented defaults
                except RetriesExhausted:
                    exhausted += 1
                    continue
                attempts += result.attempts
                done += 1

        shares = [count // tasks + (1 if t < count % tasks else 0) for t in range(tasks)]
        await asyncio.gather(*(task(share) for share in shares))
        say(
            json.dumps(
                {
                    "attempts": attempts,
                    "exhausted": exhausted,
                    "done": done,
                    "seconds": time.perf_counter() - started,
                }
            )
        )


async def holder(url: str, agent: str, ttl: float) -> None:
    async with StateStore(url) as store:
        leases = LeaseManager(store, holder="A", ttl=ttl)
        wait_for_go()
        lease = await leases.acquire(agent)
        lease.start_heartbeat(interval=ttl / 4, on_lost=lambda lease, exc: None)
        items: list[str] = []
        for i in range(3):
            items.append(f"A-{i}")
            await store.save(agent, {"owner": "A", "items": items}, lease=lease, actor="A")
        durable = await store.agent(agent, lease=lease)
        say("pause-point", lease.token)
        # the parent stops this process here, for longer than the TTL (a "GC pause"),
        # and tells it to go on once another worker took over (a condition, not a delay)
        await asyncio.to_thread(sys.stdin.readline)
        outcomes: list[str] = []
        for i in range(5):
            items.append(f"A-late-{i}")
            try:
                await store.save(agent, {"owner": "A", "items": items}, lease=lease, actor="A")
                outcomes.append("written")
            except LeaseLost as exc:
                outcomes.append(f"lost:{exc.token}<{exc.current_token}")
        for i in range(2):
            durable.data["items"] = [*durable.data.get("items", []), f"A-late-agent-{i}"]
            try:
                await durable.record("late", {"i": i}, actor="A")
                outcomes.append("written")
            except LeaseLost as exc:
                outcomes.append(f"lost:{exc.token}<{exc.current_token}")
        await lease.stop_heartbeat()
        say(json.dumps({"token": lease.token, "lost": lease.lost, "outcomes": outcomes}))


async def taker(url: str, agent: str, ttl: float) -> None:
    async with StateStore(url) as store:
        leases = LeaseManager(store, holder="B", ttl=ttl)
        wait_for_go()
        lease = await leases.acquire(agent, wait=30)
        current = await store.load(agent)
        items = list(current.data.get("items", []))
        for i in range(5):
            items.append(f"B-{i}")
            await store.save(agent, {"owner": "B", "items": items}, lease=lease, actor="B")
        await lease.release()
        say(json.dumps({"token": lease.token}))


async def step_holder(url: str, agent: str, ttl: float) -> None:
    async with StateStore(url) as store:
        leases = LeaseManager(store, holder="A", ttl=ttl)
        wait_for_go()
        lease = await leases.acquire(agent)
        runner = Steps(store, agent, lease=lease)
        ran: list[int] = []

        def effect(k: int) -> dict[str, object]:
            ran.append(k)
            return {"by": "A", "k": k}

        for k in (1, 2, 3):
            await runner.run(f"s{k}", effect, k)
        say("pause-point", lease.token)
        await asyncio.to_thread(sys.stdin.readline)  # after the pause and the takeover
        ran.clear()
        outcomes: list[object] = []
        for k in (4, 9):
            try:
                outcomes.append(await runner.run(f"s{k}", effect, k))
            except LeaseLost as exc:
                outcomes.append(f"lost:{exc.token}<{exc.current_token}")
        say(json.dumps({"token": lease.token, "outcomes": outcomes, "ran": ran}))


async def step_taker(url: str, agent: str, ttl: float) -> None:
    async with StateStore(url) as store:
        leases = LeaseManager(store, holder="B", ttl=ttl)
        wait_for_go()
        lease = await leases.acquire(agent, wait=30)
        runner = Steps(store, agent, lease=lease)
        results = [await runner.run(f"s{k}", lambda k=k: {"by": "B", "k": k}) for k in range(1, 7)]
        await lease.release()
        say(json.dumps({"token": lease.token, "results": results}))


def step_effects(log: str, pause: str | None) -> tuple[Any, Any]:
    """``(stop_at, effect)`` of the ``steps`` commands: the pause points, and step k's
    side effect (``k`` appended to LOG, fsync'ed)."""

    def stop_at(point: str) -> None:
        if pause == "slow" and not point.startswith("before"):
            time.sleep(0.02)  # widen the windows a random kill can land in
        if pause == point:
            say("at", point)
            while True:  # parked until the parent's SIGKILL; no timer involved
                signal.pause()

    def effect(k: int) -> dict[str, int]:
        stop_at(f"inside:{k}")
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{k}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        stop_at(f"after-effect:{k}")
        return {"step": k, "pid": os.getpid()}

    return stop_at, effect


async def steps(url: str, agent: str, log: str, count: int, pause: str | None) -> None:
    async with StateStore(url) as store:
        wait_for_go()
        runner = Steps(store, agent)
        stop_at, effect = step_effects(log, pause)
        results = []
        for k in range(1, count + 1):
            stop_at(f"before:{k}")
            results.append(await runner.run(f"step-{k}", effect, k))
        say(json.dumps(results))


def sync_steps(url: str, agent: str, log: str, count: int, pause: str | None) -> None:
    with SyncStateStore(url) as store:
        wait_for_go()
        runner = SyncSteps(store, agent)
        stop_at, effect = step_effects(log, pause)
        results = []
        for k in range(1, count + 1):
            stop_at(f"before:{k}")
            results.append(runner.run(f"step-{k}", effect, k))
        say(json.dumps(results))


async def keyed(url: str, name: str, log: str, count: int, agents: list[str]) -> None:
    import zlib

    async with StateStore(url) as store:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        wait_for_go()
        start = zlib.crc32(name.encode()) % count
        for j in range(count):
            i = (start + j) % count
            key = f"op-{i}"

            def apply(data: dict[str, Any], key: str = key) -> None:
                data["keys"] = [*data.get("keys", []), key]
                data["n"] = data.get("n", 0) + 1

            await update(store, agents[i % len(agents)], apply, idempotency_key=key)
            os.write(fd, f"{key}\n".encode())
        say(json.dumps({"done": count}))


def main(argv: list[str]) -> None:
    command, url, *rest = argv
    if command == "rmw":
        asyncio.run(rmw(url, rest[0], int(rest[1]), rest[2:]))
    elif command == "hammer":
        asyncio.run(hammer(url, rest[0], int(rest[1]), int(rest[2]), rest[3]))
    elif command == "holder":
        asyncio.run(holder(url, rest[0], float(rest[1])))
    elif command == "taker":
        asyncio.run(taker(url, rest[0], float(rest[1])))
    elif command == "step-holder":
        asyncio.run(step_holder(url, rest[0], float(rest[1])))
    elif command == "step-taker":
        asyncio.run(step_taker(url, rest[0], float(rest[1])))
    elif command == "steps":
        asyncio.run(steps(url, rest[0], rest[1], int(rest[2]), rest[3] if len(rest) > 3 else None))
    elif command == "keyed":
        asyncio.run(keyed(url, rest[0], rest[1], int(rest[2]), rest[3:]))
    elif command == "sync-steps":
        sync_steps(url, rest[0], rest[1], int(rest[2]), rest[3] if len(rest) > 3 else None)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
