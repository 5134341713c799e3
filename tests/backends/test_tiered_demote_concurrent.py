"""Two processes demoting one agent at once (every process that opens a store with
``demote_interval`` runs the demotion loop, as the docs' example does). Process A is
held before each call of its demotion that changes a tier while process B runs its
whole demotion (or a save, or A a rehydration held while B demotes). Before: B, finding
A's marker beside the whole stream, took it for a crashed run's, replaced the cold copy
and the marker and deleted the stream; A's last step then conflicted and its clean-up
deleted the cold copy and the marker: the agent gone from every tier, no error (and a
B held mid-copy while A finished had its cold copy deleted under it the same way). Now
the marker's creation is the claim (a conditional insert carrying a token of the
demotion's own): a demotion that finds a marker backs off without a write, and a
demotion deletes only the cold copy and marker it wrote.

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema) and one cold SQLite file; a process is held by tiers that wait on an
event before their K-th write: conditions, no timing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.base import Backend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.records import RawSnapshot
from statekeeper.testing import request

from ._services import POSTGRES_DSN, namespace, require_postgres

_WRITES = (
    "append",
    "append_batch",
    "append_together",
    "delete_agent",
    "delete_agent_at",
    "save_snapshot",
)
_HEAD = 5


class _Hold:
    """Holds the tiers it wraps before their ``k``-th write (counted across them)."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0
        self.reached, self.go = asyncio.Event(), asyncio.Event()

    def wrap(self, backend: Backend) -> Backend:
        for name in _WRITES:
            call = getattr(backend, name)

            async def hooked(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
                self.calls += 1
                if self.calls == self.k:
                    self.reached.set()
                    await self.go.wait()
                return await _call(*args, **kwargs)

            setattr(backend, name, hooked)
        return backend


Durable = Callable[[], Backend]


def _sqlite(tmp_path: Path) -> Durable:
    return lambda: SQLiteBackend(tmp_path / "durable.db")


def _postgres(tmp_path: Path) -> Durable:
    from statekeeper.backends.postgres import PostgresBackend

    return lambda: PostgresBackend(POSTGRES_DSN, schema=namespace(tmp_path), max_size=2)


def _process(tmp_path: Path, durable: Durable, hold: _Hold | None = None) -> TieredBackend:
    tiers = [durable(), SQLiteBackend(tmp_path / "cold.db")]
    if hold is not None:
        tiers = [hold.wrap(tier) for tier in tiers]
    return TieredBackend(tiers[0], cold=tiers[1], idle_after=1)


async def _whole(tmp_path: Path, durable: Durable, head: int = _HEAD) -> None:
    """A fresh process finds the agent whole, its keys too, and its tiers consistent."""
    fresh = _process(tmp_path, durable)
    try:
        assert await fresh.head("a") == head  # (before: 0, the agent in no tier)
        assert [e.seq for e in await fresh.read("a")] == list(range(1, head + 1))
        assert (await fresh.append(request("a", 2, key="k2"))).duplicate
        assert await fresh.durable.head(COLD_MARKER + "a") == 0  # (brought back)
        assert await fresh.demote("a")  # and it demotes cleanly again
        assert await fresh.head("a") == head
        snap = await fresh.latest_snapshot("a")
        assert snap is not None and snap.payload == b"snap"
    finally:
        await fresh.close()


async def _steps(tmp_path: Path, durable: Durable, op: str) -> int:
    """How many writes ``op`` makes alone (the steps to hold it before)."""
    hold = _Hold(0)
    one = _process(tmp_path, durable, hold)
    try:
        await _setup(one, demoted=op == "rehydrate")
        hold.calls = 0
        if op == "demote":
            assert await one.demote("a")
        else:
            assert await one.head("a") == _HEAD
        steps = hold.calls  # (before the drop_all: its writes are not the op's steps)
        await one.drop_all()
        return steps
    finally:
        await one.close()


async def _setup(backend: TieredBackend, *, demoted: bool = False) -> None:
    await backend.durable.initialize()
    for seq in range(_HEAD):
        await backend.append(request("a", seq, key=f"k{seq}"))
        if seq == 2:  # (a snapshot: a step of its own in a demotion's copy)
            await backend.save_snapshot("a", RawSnapshot(3, 1.0, b"snap", b""))
    if demoted:
        assert await backend.demote("a")


async def _race(
    tmp_path: Path,
    durable: Durable,
    k: int,
    held_op: Callable[[TieredBackend], Awaitable[Any]],
    other_op: Callable[[TieredBackend], Awaitable[Any]],
    *,
    demoted: bool = False,
) -> tuple[Any, Any]:
    hold = _Hold(k)
    a, b = _process(tmp_path, durable, hold), _process(tmp_path, durable)
    try:
        await _setup(b, demoted=demoted)
        task: asyncio.Future[Any] = asyncio.ensure_future(held_op(a))
        done = asyncio.create_task(hold.reached.wait())
        await asyncio.wait([task, done], return_when=asyncio.FIRST_COMPLETED)
        assert hold.reached.is_set(), f"{held_op} made fewer than {k} writes"
        other = await other_op(b)
        hold.go.set()
        # (an error is returned, checked after the agent: what was lost shows first)
        results = await asyncio.gather(task, return_exceptions=True)
        return results[0], other
    finally:
        hold.go.set()
        await a.close()
        await b.close()


async def _two_demotions(tmp_path: Path, durable: Durable) -> None:
    for k in range(1, await _steps(tmp_path, durable, "demote") + 1):
        held, other = await _race(tmp_path, durable, k, lambda t: t.demote("a"), _demote)
        await _whole(tmp_path, durable)
        assert [held, other].count(True) == 1, (k, held, other)  # exactly one wins
        await _drop(tmp_path, durable)


async def _demote(b: TieredBackend) -> bool:
    return await b.demote("a")


async def _drop(tmp_path: Path, durable: Durable) -> None:
    one = _process(tmp_path, durable)
    try:
        await one.drop_all()
    finally:
        await one.close()


async def test_two_demotions_of_one_agent_at_every_step_sqlite(tmp_path: Path) -> None:
    await _two_demotions(tmp_path, _sqlite(tmp_path))


async def test_two_demotions_of_one_agent_at_every_step_postgres(tmp_path: Path) -> None:
    require_postgres()
    await _two_demotions(tmp_path, _postgres(tmp_path))
    await _drop(tmp_path, _postgres(tmp_path))


@pytest.mark.parametrize("make", [_sqlite, _postgres], ids=["sqlite", "postgres"])
async def test_a_save_during_each_step_of_a_demotion_is_kept(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    if make is _postgres:
        require_postgres()
    durable = make(tmp_path)

    async def save(b: TieredBackend) -> None:
        await b.append(request("a", _HEAD, key="late"))

    for k in range(1, await _steps(tmp_path, durable, "demote") + 1):
        demoted, _ = await _race(tmp_path, durable, k, lambda t: t.demote("a"), save)
        fresh = _process(tmp_path, durable)
        try:
            assert await fresh.head("a") == _HEAD + 1, (k, demoted)
            assert (await fresh.lookup_key("a", "late")) is not None, k
        finally:
            await fresh.close()
        await _whole(tmp_path, durable, _HEAD + 1)
        assert demoted is False, (k, demoted)  # backed off (before: IntegrityError)
        await _drop(tmp_path, durable)
    await _drop(tmp_path, durable)


@pytest.mark.parametrize("make", [_sqlite, _postgres], ids=["sqlite", "postgres"])
async def test_a_demotion_during_each_step_of_a_rehydration_loses_nothing(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    if make is _postgres:
        require_postgres()
    durable = make(tmp_path)

    async def rehydrate(a: TieredBackend) -> int:
        return await a.head("a")

    for k in range(1, await _steps(tmp_path, durable, "rehydrate") + 1):
        head, _ = await _race(tmp_path, durable, k, rehydrate, _demote, demoted=True)
        await _whole(tmp_path, durable)
        assert head == _HEAD, (k, head)
        await _drop(tmp_path, durable)
    await _drop(tmp_path, durable)


@pytest.mark.parametrize("make", [_sqlite, _postgres], ids=["sqlite", "postgres"])
async def test_a_delete_during_each_step_of_a_demotion_leaves_nothing(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """The marker is a claim before the cold copy is whole (h/tiereddemote), and a delete
    acts only on cold copies that are this store's (h/tieredshare): a claim's partial
    copy is this store's stream up to its head, deleted with the agent. Before the merge
    reconciled them, a delete took such a copy for another store's: it was left in the
    cold tier (a deleted agent's data kept) and a new agent of that id could never be
    demoted (ConfigurationError)."""
    if make is _postgres:
        require_postgres()
    durable = make(tmp_path)

    async def delete(b: TieredBackend) -> bool:
        return await b.delete_agent("a")

    for k in range(1, await _steps(tmp_path, durable, "demote") + 1):
        demoted, deleted = await _race(tmp_path, durable, k, lambda t: t.demote("a"), delete)
        assert deleted is True and demoted is False, (k, demoted, deleted)
        fresh = _process(tmp_path, durable)
        try:
            assert await fresh.head("a") == 0, k
            assert await fresh.count_agents() == 0, k
            assert fresh.cold is not None and await fresh.cold.head("a") == 0, k
            assert await fresh.durable.head(COLD_MARKER + "a") == 0, k
            await fresh.append(request("a", 0))
            assert await fresh.demote("a"), k  # (before: ConfigurationError)
            assert await fresh.head("a") == 1, k
        finally:
            await fresh.close()
        await _drop(tmp_path, durable)
    await _drop(tmp_path, durable)
