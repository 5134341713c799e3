"""Chaos: writers, readers and a lease-holding worker pool — all real processes — keep
working while their PRIVATE servers are killed, frozen (SIGSTOP/SIGCONT) and restarted
and writers are SIGKILLed at random; then nothing promised may be broken:

* every acknowledged write is stored, at the seq it was acknowledged with, once;
* no read ever went backwards: a load that started after a write was acknowledged, or
  after another load returned, sees at least that seq — across processes, stores and
  server restarts (times on the machine-wide monotonic clock);
* no durable step ran again after its record was acknowledged, and each job's steps are
  recorded exactly once;
* ``verify()`` is clean; no process met an exception outside ``StatekeeperError``.

Two targets: tiered (a private redis-server hot tier over a SQLite file) and a private
PostgreSQL (``initdb`` in a temp dir). The fault schedule comes from a seeded RNG; the
seed is printed — ``STATEKEEPER_CHAOS_SEED=<seed>`` replays the same schedule. Bounded:
about 15 s of faults per target, and every wait is for a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import tiered_url
from statekeeper.concurrency import Steps

pytestmark = pytest.mark.slow  # chaos: workers killed and paused at random

CHILD = Path(__file__).with_name("_chaos_child.py")
AGENTS = [f"agent-{i}" for i in range(4)]
JOBS = [f"job-{i}" for i in range(6)]
UNITS = 4  # of _chaos_child.UNIT_SECONDS each: 6 x 4 x 0.3 s shared by two workers
WRITERS, READERS, WORKERS = 3, 2, 2
CHAOS_SECONDS = 15.0
LEASE_TTL = 2.0


# -- the private servers and what can be done to them ---------------------------------


class Target:
    url: str
    name: str

    def kill(self) -> None: ...
    def start(self) -> None: ...
    def pids(self) -> list[int]: ...  # type: ignore[empty-body]

    def freeze(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


class TieredTarget(Target):
    name = "tiered"

    def __init__(self, server: Any, tmp_path: Path) -> None:
        self.server = server
        self.url = tiered_url(
            hot=f"{server.url}?prefix=chaos:", durable=f"sqlite:///{tmp_path / 'durable.db'}"
        )
        self.durable_url = f"sqlite:///{tmp_path / 'durable.db'}"

    def kill(self) -> None:
        self.server.kill()  # a cache that crashed: it comes back empty

    def start(self) -> None:
        self.server.start()

    def pids(self) -> list[int]:
        return [self.server.proc.pid] if self.server.proc is not None else []


class PostgresTarget(Target):
    name = "postgresql"

    def __init__(self, server: Any) -> None:
        self.server = server
        self.url = f"{server.dsn}?schema=chaos"
        self.durable_url = self.url
        self.up = True

    def kill(self) -> None:
        self.server.stop("immediate")  # every server process quits at once: a crash
        self.up = False

    def start(self) -> None:
        self.server.start()  # crash recovery, then accepting connections again
        self.up = True

    def pids(self) -> list[int]:
        """The postmaster and every process it started."""
        pidfile = Path(self.server.data) / "postmaster.pid"
        try:
            postmaster = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        found = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                        found.append(int(entry.name))
        return found


@contextlib.contextmanager
def target_for(kind: str, tmp_path: Path) -> Iterator[Target]:
    if kind == "tiered":
        pytest.importorskip("redis")
        from tests.backends._services import private_redis

        with private_redis() as server:
            yield TieredTarget(server, tmp_path)
    else:
        pytest.importorskip("psycopg")
        from tests.backends._services import private_postgres

        with private_postgres() as server:
            yield PostgresTarget(server)


# -- the processes --------------------------------------------------------------------


@dataclass
class Child:
    role: str
    name: str
    log: Path
    proc: subprocess.Popen[bytes]
    err: Path
    killed: bool = False


@dataclass
class Crowd:
    url: str
    dir: Path
    stop: Path
    children: list[Child] = field(default_factory=list)

    @property
    def go(self) -> Path:
        """Made with the first fault: the pool starts its jobs then."""
        return self.dir / "go"

    def spawn(self, role: str, name: str, *args: str) -> Child:
        log, err = self.dir / f"{name}.log", self.dir / f"{name}.err"
        log.touch()
        with err.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(CHILD), role, self.url, name, str(log), str(self.stop), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        child = Child(role, name, log, proc, err)
        self.children.append(child)
        return child

    def live(self, role: str) -> list[Child]:
        return [c for c in self.children if c.role == role and not c.killed]

    def stacks(self) -> str:
        """What every live process is doing (its tasks' and threads' stacks) and the last
        errors it went on after: for the message of a wait that never ended."""
        live = [c for c in self.children if not c.killed and c.proc.poll() is None]
        for child in live:
            child.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10  # a process that cannot answer: say so below
        while time.monotonic() < deadline and not all(
            "=== tasks ===" in c.err.read_text(errors="replace") for c in live
        ):
            time.sleep(0.05)
        return "\n".join(
            f"--- {c.name} ({c.role}) ---\n{c.err.read_text(errors='replace')[-4000:]}"
            for c in live
        )

    def kill_all(self) -> None:
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def wait_until(
    condition: Callable[[], bool], what: str, crowd: Crowd, limit: float = 120.0
) -> None:
    """Poll a condition; ``limit`` only ends a test whose condition never comes true.
    A child that failed ends the wait at once, with its error."""
    deadline = time.monotonic() + limit
    while not condition():
        for c in crowd.children:
            code = c.proc.poll()
            assert c.killed or code in (None, 0), (c.name, code, c.err.read_text()[-3000:])
        assert time.monotonic() < deadline, f"never happened: {what}\n{crowd.stacks()}"
        time.sleep(0.05)


async def _retrying(url: str, work: Callable[[StateStore], Any]) -> Any:
    """Run ``work`` on a fresh store until the server lets it (it may be starting up)."""
    from statekeeper.errors import StatekeeperError

    deadline = time.monotonic() + 120
    while True:
        try:
            async with StateStore(url) as store:
                return await work(store)
        except StatekeeperError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _seed(store: StateStore) -> None:
    for agent in AGENTS:
        if await store.get(agent) is None:
            await store.save(agent, {"last": None})
    for job in JOBS:
        if await store.get(job) is None:
            await store.save(job, {"units": UNITS})


# -- the test -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tiered", "postgresql"])
def test_chaos(kind: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("STATEKEEPER_CHAOS_SEED") or secrets.randbelow(2**32))
    print(f"\nchaos seed {seed} ({kind}); replay with STATEKEEPER_CHAOS_SEED={seed}")
    rng = random.Random(seed)
    with target_for(kind, tmp_path) as target:
        asyncio.run(_retrying(target.url, _seed))
        crowd = Crowd(target.url, tmp_path, tmp_path / "stop")
        incarnations = {f"w{i}": 0 for i in range(WRITERS)}
        try:
            for slot in incarnations:
                crowd.spawn("writer", f"{slot}.0", *AGENTS)
            for r in range(READERS):
                crowd.spawn("reader", f"r{r}", *AGENTS)
            for p in range(WORKERS):
                crowd.spawn("worker", f"p{p}", str(LEASE_TTL), str(crowd.go), *JOBS)
            wait_until(
                lambda: all(
                    c.log.stat().st_size > 0 for c in crowd.live("writer") + crowd.live("reader")
                ),
                "every writer and reader at work",
                crowd,
            )
            done = _chaos(rng, target, crowd, incarnations)
            print(f"{kind}: faults {done}")
            # healed: the system must make progress again — every writer acknowledges
            # a write it started after the last fault
            healed = time.monotonic()
            wait_until(
                lambda: all(
                    any(r["t0"] > healed for r in records(c.log)) for c in crowd.live("writer")
                ),
                "writers making progress after the faults",
                crowd,
            )
            wait_until(
                lambda: all(c.proc.poll() is not None for c in crowd.live("worker")),
                "the pool finishing every job",
                crowd,
            )
            crowd.stop.touch()
            for child in crowd.children:
                if not child.killed:
                    child.proc.wait(timeout=120)
        finally:
            crowd.stop.touch()
            target.thaw()
            crowd.kill_all()
        _check_processes(crowd)
        asyncio.run(_retrying(target.url, lambda store: _check_store(store, crowd, kind)))
        if isinstance(target, TieredTarget):  # and the tier of record itself
            asyncio.run(_retrying(target.durable_url, lambda s: _check_acks(s, crowd)))


def _chaos(
    rng: random.Random, target: Target, crowd: Crowd, incarnations: dict[str, int]
) -> dict[str, int]:
    """Faults, one after another, for CHAOS_SECONDS; every kind at least once."""
    kinds = ["kill-writer", "kill-server", "freeze-server"]
    rng.shuffle(kinds)
    counts: dict[str, int] = defaultdict(int)
    end = time.monotonic() + CHAOS_SECONDS
    crowd.go.touch()
    while kinds or time.monotonic() < end:
        kind = kinds.pop() if kinds else rng.choice(["kill-writer", "kill-server", "freeze-server"])
        counts[kind] += 1
        if kind == "kill-writer":
            victim = rng.choice(crowd.live("writer"))
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            victim.killed = True
            slot = victim.name.split(".")[0]
            incarnations[slot] += 1
            crowd.spawn("writer", f"{slot}.{incarnations[slot]}", *AGENTS)
        elif kind == "kill-server":
            target.kill()
            time.sleep(rng.uniform(0.2, 1.0))  # the outage (fault injection, not a wait)
            target.start()
        else:
            target.freeze()
            time.sleep(rng.uniform(0.3, 1.5))  # the freeze
            target.thaw()
        time.sleep(rng.uniform(0.3, 1.0))  # time between faults
    return dict(counts)


def _check_processes(crowd: Crowd) -> None:
    untyped = [
        line for c in crowd.children for line in c.err.read_text().splitlines() if "UNTYPED" in line
    ]
    assert untyped == [], untyped[:10]
    for child in crowd.children:
        if not child.killed:
            assert child.proc.returncode == 0, (child.name, child.err.read_text()[-3000:])


async def _check_acks(store: StateStore, crowd: Crowd) -> int:
    """Every acknowledged write is stored once, at its acknowledged seq; no key twice."""
    acks = [r for c in crowd.children if c.role == "writer" for r in records(c.log)]
    assert acks, "no write was acknowledged"
    stored: dict[str, dict[str, list[int]]] = {}
    for agent in AGENTS:
        keys: dict[str, list[int]] = defaultdict(list)
        async for event in store.history(agent):
            if event.idempotency_key:
                keys[event.idempotency_key].append(event.seq)
        stored[agent] = keys
        doubled = {k: s for k, s in keys.items() if len(s) > 1}
        assert doubled == {}, f"{agent}: writes stored twice: {doubled}"
    missing = [a for a in acks if stored[a["a"]].get(a["k"]) != [a["s"]]]
    assert missing == [], f"{len(missing)} of {len(acks)} acknowledged writes: {missing[:5]}"
    return len(acks)


def _check_monotonic(crowd: Crowd) -> int:
    """No load returned a seq below one acknowledged (by a write, or by an earlier load)
    before the load started. Returns the number of loads checked."""
    events: dict[str, list[tuple[float, float, int, str]]] = defaultdict(list)
    reads = 0
    for child in crowd.children:
        if child.role not in ("writer", "reader"):
            continue
        for r in records(child.log):
            events[r["a"]].append((r["t0"], r["t1"], r["s"], child.role + ":" + child.name))
            reads += child.role == "reader"
    backwards = []
    for agent, evs in events.items():
        by_end = sorted(evs, key=lambda e: e[1])
        i, best, best_from = 0, 0, ""
        for t0, _t1, seq, who in sorted(evs, key=lambda e: e[0]):
            while i < len(by_end) and by_end[i][1] < t0:
                if by_end[i][2] > best:
                    best, best_from = by_end[i][2], by_end[i][3]
                i += 1
            if who.startswith("reader") and seq < best:
                backwards.append(f"{agent}: {who} read seq {seq} after {best_from} had seq {best}")
    assert reads > 0, "nothing was read"
    assert backwards == [], f"{len(backwards)} of {reads} reads went backwards: {backwards[:5]}"
    return reads


def _check_steps(crowd: Crowd) -> int:
    """No unit's effect ran after its step record was acknowledged (to any worker)."""
    pool = [r for c in crowd.children if c.role == "worker" for r in records(c.log)]
    acknowledged: dict[tuple[str, int], float] = {}
    for r in pool:
        if "r" in r:
            unit = (r["r"], r["u"])
            acknowledged[unit] = min(r["t"], acknowledged.get(unit, r["t"]))
    again = [r for r in pool if "e" in r and r["t"] > acknowledged.get((r["e"], r["u"]), r["t"])]
    assert again == [], f"steps ran again after their record was acknowledged: {again[:5]}"
    return sum("e" in r for r in pool)


async def _check_jobs(store: StateStore) -> None:
    """Every job done, each of its units recorded exactly once."""
    for job in JOBS:
        state = await store.load(job)
        assert state.data.get("status") == "done", (job, state.data)
        assert list(await Steps(store, job).results()) == [f"unit-{u}" for u in range(UNITS)]
        step_keys = [e.idempotency_key async for e in store.history(job) if e.type == "step"]
        assert sorted(step_keys) == sorted(f"step:unit-{u}" for u in range(UNITS)), step_keys  # type: ignore[type-var]


async def _check_verify(store: StateStore) -> None:
    report = await store.verify()
    assert report.ok, report.problems


async def _check_store(store: StateStore, crowd: Crowd, kind: str) -> None:
    """Every check runs (a failure of one does not hide the others); all must pass."""
    failed: list[str] = []
    counts: dict[str, int] = {}

    async def check(name: str, fn: Any) -> None:
        try:
            out = fn()
            if asyncio.iscoroutine(out):
                out = await out
            if isinstance(out, int):
                counts[name] = out
        except AssertionError as exc:
            failed.append(f"[{name}] {str(exc)[:1500]}")

    await check("acknowledged writes", lambda: _check_acks(store, crowd))
    await check("monotonic reads", lambda: _check_monotonic(crowd))
    await check("steps", lambda: _check_steps(crowd))
    await check("jobs", lambda: _check_jobs(store))
    await check("verify", lambda: _check_verify(store))
    print(f"{kind}: {counts}")
    assert failed == [], "\n".join(failed)
