"""Exactly-once under SIGKILL, on SQLite and PostgreSQL.

Keyed updates: workers that retry the same keyed operations (as a crashed client's
replacement does) are killed at random points — before, during and after a write,
between its commit and its acknowledgement — and replaced; once the workers finish
every operation, each was applied exactly once: none twice (a retry of a write that had
landed), none lost, every acknowledged one stored. Durable steps: the worker is killed
at random points and restarted; each step is recorded once, and an effect ran again
only for a step a kill interrupted (never more extra runs than kills).

The kills land at random points of the run, chosen by progress (a kill once the
acknowledgement log grew by a random number of lines), never by a duration; the seed
is printed and ``STATEKEEPER_KILL_SEED=<seed>`` replays the same choices.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore

from .test_multiprocess import finish, go, kill_all, spawn

pytestmark = pytest.mark.slow  # real processes, SIGKILLed (CI runs the slow tests)

AGENTS = [f"account-{i}" for i in range(3)]
OPERATIONS = 40
KILLS = 6
WORKERS_AT_ONCE = 2


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    pytest.importorskip("psycopg")
    from tests.backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres

    require_postgres()
    schema = namespace(tmp_path)
    drop_schema(schema)
    yield f"{POSTGRES_DSN}?schema={schema}"
    drop_schema(schema)


def _lines(log: Path) -> list[str]:
    try:
        return log.read_text().split()
    except FileNotFoundError:
        return []


def _wait_for_progress(log: Path, past: int, proc: subprocess.Popen[str]) -> None:
    """Until the log has more than ``past`` lines, or ``proc`` ended (bounded)."""
    deadline = time.monotonic() + 120
    while len(_lines(log)) <= past and proc.poll() is None:
        assert time.monotonic() < deadline, "no worker made progress in 120 s"
        time.sleep(0.005)


async def _stored(url: str) -> dict[str, dict]:  # type: ignore[type-arg]
    async with StateStore(url) as store:
        await store.health()  # (creates the schema on a first open)
        return {a: (s.data if (s := await store.get(a)) else {}) for a in AGENTS}


def test_no_keyed_update_is_applied_twice_or_lost_when_workers_are_killed(
    url: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("STATEKEEPER_KILL_SEED") or secrets.randbits(32))
    print(f"\nSTATEKEEPER_KILL_SEED={seed}")
    rng = random.Random(seed)
    asyncio.run(_stored(url))  # the schema, before the race
    log = tmp_path / "acks.log"
    made = 0

    def worker() -> subprocess.Popen[str]:
        nonlocal made
        made += 1
        proc = spawn("keyed", url, f"w{made}-{seed}", str(log), str(OPERATIONS), *AGENTS)
        go(proc)
        return proc

    procs = [worker() for _ in range(WORKERS_AT_ONCE)]
    everyone = list(procs)
    try:
        for _ in range(KILLS):
            victim = rng.randrange(len(procs))
            _wait_for_progress(log, len(_lines(log)) + rng.randint(0, 3), procs[victim])
            procs[victim].kill()  # SIGKILL, wherever it is
            procs[victim].wait()
            procs[victim] = worker()
            everyone.append(procs[victim])
        reports = [finish(proc, timeout=300) for proc in procs]
    finally:
        kill_all(everyone)
    assert reports == [{"done": OPERATIONS}] * WORKERS_AT_ONCE

    stored = asyncio.run(_stored(url))
    applied = Counter(key for data in stored.values() for key in data.get("keys", []))
    twice = sorted(key for key, times in applied.items() if times > 1)
    assert not twice, f"applied more than once: {twice} (seed {seed})"
    expected = {f"op-{i}" for i in range(OPERATIONS)}
    assert set(applied) == expected, f"lost: {sorted(expected - set(applied))} (seed {seed})"
    acknowledged = set(_lines(log))
    assert acknowledged <= set(applied)
    for agent, data in stored.items():
        assert data.get("n", 0) == len(data.get("keys", [])), (agent, seed)
        mine = {f"op-{i}" for i in range(OPERATIONS) if AGENTS[i % len(AGENTS)] == agent}
        assert set(data.get("keys", [])) == mine, (agent, seed)


STEPS = 12


async def _recorded_steps(url: str) -> list[str]:
    from statekeeper.concurrency import Steps

    async with StateStore(url) as store:
        assert (await store.verify()).ok
        return list(await Steps(store, "job").results())


def test_no_recorded_step_runs_again_when_workers_are_killed(url: str, tmp_path: Path) -> None:
    """Durable steps, the worker SIGKILLed at random progress and restarted: each step is
    recorded once, and an effect ran again only for a step a kill interrupted between its
    effect and its record — never more extra runs than kills."""
    seed = int(os.environ.get("STATEKEEPER_KILL_SEED") or secrets.randbits(32))
    print(f"\nSTATEKEEPER_KILL_SEED={seed}")
    rng = random.Random(seed)
    asyncio.run(_stored(url))
    log = tmp_path / "effects.log"
    kills = 0
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(KILLS):
            proc = spawn("steps", url, "job", str(log), str(STEPS), "slow")
            procs.append(proc)
            go(proc)
            _wait_for_progress(log, len(_lines(log)) + rng.randint(0, 2), proc)
            if proc.poll() is not None:
                break
            proc.kill()
            proc.wait()
            kills += 1
        last = spawn("steps", url, "job", str(log), str(STEPS))
        procs.append(last)
        go(last)
        results = finish(last, timeout=300)
    finally:
        kill_all(procs)
    assert [r["step"] for r in results] == list(range(1, STEPS + 1))  # type: ignore[index]
    assert asyncio.run(_recorded_steps(url)) == [f"step-{k}" for k in range(1, STEPS + 1)]
    effects = Counter(int(k) for k in _lines(log))
    assert set(effects) == set(range(1, STEPS + 1)), seed
    assert sum(effects.values()) - STEPS <= kills, (effects, kills, seed)
