"""The processes of the chaos test (``test_chaos.py``): real writers, readers and
lease-holding pool workers that keep going while their servers are killed, frozen and
restarted, and that log what they were told (one JSON object a line, written with one
``write(2)`` on an ``O_APPEND`` file, so a SIGKILL never leaves half a line behind and
nothing that was logged is lost with the process).

Usage: ``python _chaos_child.py ROLE URL NAME LOG STOPFILE ARGS...``; every role works
until STOPFILE exists (the pool: until every job is done) and exits 0.

writer URL NAME LOG STOP AGENT...
    Appends events with idempotency key ``NAME-n`` to random agents; an append that
    failed is retried with the same key until acknowledged. Logs every acknowledged
    append: ``{"a": agent, "k": key, "s": seq, "t0": start, "t1": end}`` (times on
    the machine-wide monotonic clock).
reader URL NAME LOG STOP AGENT...
    Loads every agent over and over (a new store every 25 rounds: a "restart") and logs
    each answer: ``{"a": agent, "s": seq, "t0": start, "t1": end}``.
worker URL NAME LOG STOP TTL GO JOB...
    A pool worker: once the file GO exists (the parent makes it with the first fault,
    so the pool works while the faults happen), takes the lease of an unfinished job,
    runs its units as durable steps (``unit-k``, each ``UNIT_SECONDS`` long) under the
    lease, marks the job done, releases. The side effect of a unit logs
    ``{"e": job, "u": k, "t": time}``; a step whose run returned logs
    ``{"r": job, "u": k, "t": time}``.

A typed error a process goes on after is one ``retry ROLE ERROR: message`` line on its
stderr; SIGUSR1 prints every task's and thread's stack there (the parent asks when a
wait of the test never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import os
import random
import signal
import sys
import time
from collections.abc import Coroutine
from typing import Any

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager, Steps
from statekeeper.errors import ConfigurationError, LeaseHeld, LeaseLost, StatekeeperError

PAUSE = 0.05  # after an error: the server is probably down or frozen
UNIT_SECONDS = 0.3  # a unit's work: the pool's jobs last through the faults


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, **record: Any) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())


def retrying(role: str, exc: BaseException) -> None:
    """A typed error the process goes on after: one line on stderr, so a process that
    never gets past one (a stall) shows what stopped it."""
    print(f"retry {role} {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
    sys.stderr.flush()


def dump_tasks() -> None:
    """SIGUSR1: every task's stack and every thread's, on stderr (the parent asks when
    a wait never ends)."""
    print("=== tasks ===", file=sys.stderr)
    for task in asyncio.all_tasks():
        task.print_stack(file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()


def problem(exc: BaseException) -> None:
    """An exception outside the library's hierarchy: printed, and the parent fails."""
    print(f"UNTYPED {type(exc).__module__}.{type(exc).__name__}: {exc}", file=sys.stderr)
    sys.stderr.flush()


def stopped(stop: str) -> bool:
    """The parent's signal to finish (a file: it survives the parent's own hiccups)."""
    return os.path.exists(stop)


async def close(store: StateStore) -> None:
    with contextlib.suppress(Exception):
        await store.close()


async def writer(url: str, name: str, log: Log, stop: str, agents: list[str]) -> None:
    rng = random.Random(f"{name}:{os.getpid()}")
    store = StateStore(url)
    n = 0
    while not stopped(stop):
        n += 1
        agent, key = rng.choice(agents), f"{name}-{n}"
        while not stopped(stop):
            started = time.monotonic()
            try:
                done = await store.append(
                    agent,
                    "write",
                    {"writer": name},
                    ops=[{"op": "add", "path": "/last", "value": key}],
                    idempotency_key=key,
                )
            except ConfigurationError:
                raise  # a bug of this program, not a fault of the servers
            except StatekeeperError as exc:
                retrying("writer", exc)
                await asyncio.sleep(PAUSE)
                continue
            except Exception as exc:
                problem(exc)
                await asyncio.sleep(PAUSE)
                continue
            log.write(a=agent, k=key, s=done.last_seq, t0=started, t1=time.monotonic())
            break
    await close(store)


async def reader(url: str, name: str, log: Log, stop: str, agents: list[str]) -> None:
    rounds = 0
    store = StateStore(url)
    while not stopped(stop):
        rounds += 1
        if rounds % 25 == 0:  # a fresh store: nothing remembered from earlier reads
            await close(store)
            store = StateStore(url)
        for agent in agents:
            started = time.monotonic()
            try:
                seq = (await store.load(agent)).seq
            except StatekeeperError as exc:
                retrying("reader", exc)
                await asyncio.sleep(PAUSE)
                continue
            except Exception as exc:
                problem(exc)
                await asyncio.sleep(PAUSE)
                continue
            log.write(a=agent, s=seq, t0=started, t1=time.monotonic(), r=name)
        await asyncio.sleep(0.01)  # pace: a reader is not a load generator
    await close(store)


async def work_unit(log: Log, job: str, unit: int) -> dict[str, Any]:
    log.write(e=job, u=unit, t=time.monotonic())  # the side effect
    await asyncio.sleep(UNIT_SECONDS)
    return {"unit": unit, "pid": os.getpid()}


async def run_job(store: StateStore, leases: LeaseManager, log: Log, job: str) -> None:
    lease = await leases.try_acquire(job)
    if lease is None:
        return
    lease.start_heartbeat(on_lost=lambda lease, exc: None)
    try:
        state = await store.load(job)
        if state.data.get("status") == "done":
            return
        steps = Steps(store, job, lease=lease)
        for unit in range(state.data["units"]):
            while True:
                if lease.lost:
                    return
                try:
                    await steps.run(f"unit-{unit}", work_unit, log, job, unit)
                except LeaseLost:
                    return
                except StatekeeperError as exc:
                    retrying("worker", exc)
                    await asyncio.sleep(PAUSE)  # not recorded as far as we know: again
                    continue
                log.write(r=job, u=unit, t=time.monotonic())
                break
        while True:
            try:
                await store.append(
                    job,
                    "done",
                    {},
                    ops=[{"op": "add", "path": "/status", "value": "done"}],
                    lease=lease,
                    idempotency_key=f"done:{job}",
                )
                return
            except LeaseLost:
                return
            except StatekeeperError as exc:
                retrying("worker", exc)
                await asyncio.sleep(PAUSE)
    finally:
        with contextlib.suppress(Exception):
            await lease.release()


async def worker(url: str, name: str, log: Log, stop: str, ttl: float, jobs: list[str]) -> None:
    store = StateStore(url)
    leases = LeaseManager(store, holder=name, ttl=ttl)
    while True:
        pending = 0
        for job in jobs:
            try:
                state = await store.load(job)
                if state.data.get("status") == "done":
                    continue
                pending += 1
                await run_job(store, leases, log, job)
            except (StatekeeperError, LeaseHeld) as exc:
                retrying("worker", exc)
                pending += 1
                await asyncio.sleep(PAUSE)
            except Exception as exc:
                problem(exc)
                pending += 1
                await asyncio.sleep(PAUSE)
        if pending == 0:
            break
        await asyncio.sleep(PAUSE)  # the others are leased: look again soon
    await close(store)


def main(argv: list[str]) -> None:
    role, url, name, log_path, stop, *rest = argv
    log = Log(log_path)
    if role == "writer":
        run = writer(url, name, log, stop, rest)
    elif role == "reader":
        run = reader(url, name, log, stop, rest)
    elif role == "worker":
        while not os.path.exists(rest[1]) and not stopped(stop):
            time.sleep(PAUSE)  # the parent's signal (GO): the faults begin
        run = worker(url, name, log, stop, float(rest[0]), rest[2:])
    else:
        raise SystemExit(f"unknown role {role!r}")
    asyncio.run(answering_dumps(run))


async def answering_dumps(run: Coroutine[Any, Any, None]) -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    await run


if __name__ == "__main__":
    main(sys.argv[1:])
