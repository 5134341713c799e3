"""One retention run at a time per store (:mod:`statekeeper.governance.retention_lock`).

Two ``apply_retention`` runs on one store at once (a cron job overlapping the next, two
operators) both went ahead: both planned the same agents, and where they worked one at
the same moment both reported its history removed and the audit log recorded it twice.
Now a run holds the store's run lock (a lease on the engine, renewed while it runs) and
a second run is refused at once with :class:`RetentionRunning`, naming the holder and
when its lease expires, before it reads anything. Forced with a hook that holds the
first run inside its plan, never by timing."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Capability
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import LeaseHeld, LeaseLost, RetentionRunning
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance import retention as r
from statekeeper.governance import retention_lock as rl
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.retention_idle import head_seen

from ..backends._services import fresh_url
from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')
POLICY = RetentionPolicy.parse("acme keep_last=1\nbeta keep_last=1\n")
AGENTS = ("acme/a1", "acme/a2", "beta/b1")
ENGINES = ["sqlite", "postgresql", "redis"]


def _options(governed: bool) -> dict[str, Any]:
    if not governed:
        return {}
    return {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}


async def _seed(store: StateStore) -> None:
    for agent in AGENTS:
        for n in range(3):
            await store.save(agent, {"n": n})


class Held:
    """Holds the first run that plans a compaction inside its plan (the others pass)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inside = asyncio.Event()
        self.go = asyncio.Event()
        real = head_seen

        async def holding(*args: Any) -> Any:
            if not self.inside.is_set():
                self.inside.set()
                await self.go.wait()
            return await real(*args)

        monkeypatch.setattr(r, "head_seen", holding)


@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_second_run_while_one_runs_is_refused_naming_the_holder(
    engine: str, governed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if governed and engine != "sqlite":
        pytest.skip("the principal is named the same on every engine")
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, **_options(governed)) as first,
            StateStore(url, **_options(governed)) as second,
        ):
            await _seed(first)
            held = Held(monkeypatch)
            running = asyncio.ensure_future(apply_retention(first, POLICY))
            await held.inside.wait()
            with pytest.raises(RetentionRunning) as refused:
                await apply_retention(second, POLICY)
            assert isinstance(refused.value, LeaseHeld)
            assert refused.value.namespace == ""
            assert f"pid {os.getpid()}" in refused.value.holder
            assert ("principal 'ops'" in refused.value.holder) == governed
            assert refused.value.expires_at > time.time()
            said = str(refused.value)
            assert "another retention run holds the run lock of the store" in said
            assert refused.value.holder in said and "UTC" in said
            # a dry run changes nothing: it takes no lock
            planned = await apply_retention(second, POLICY, dry_run=True)
            assert {a.outcome for a in planned.actions} == {"dry-run"}
            held.go.set()
            done = await running
            assert sorted(a.agent_id for a in done.actions if a.outcome == "done") == sorted(AGENTS)
            # released at its end: the next run goes ahead (nothing left to do)
            again = await apply_retention(second, POLICY)
            assert [a for a in again.actions if a.outcome == "done"] == []
            if governed:
                log = AuditLog(first.backend, KEYRING)
                entries = [e async for e in log.entries()]
                compacted = [
                    str(e.agent_id)
                    for e in entries
                    if (e.operation, e.outcome) == ("compact", "done")
                ]
                assert sorted(compacted) == sorted(AGENTS)  # once each
                # a run lock is the store's own lease, not an agent's granted unlogged
                verified = await log.verify()
                assert verified.ok, verified.problems


async def test_a_crashed_runs_lock_expires_and_the_next_run_proceeds(tmp_path: Path) -> None:
    now = [time.time()]
    backend = SQLiteBackend(str(tmp_path / "s.db"), clock=lambda: now[0])
    async with StateStore(backend) as store:
        await _seed(store)
        # a run that took the lock and died: nothing renews or releases it
        await backend.acquire_lease(rl.lock_id(""), "retention run pid 1 on gone (dead)", 60.0)
        with pytest.raises(RetentionRunning, match="pid 1 on gone"):
            await apply_retention(store, POLICY)
        now[0] += 61.0  # its lease ran out
        done = await apply_retention(store, POLICY)
        assert sorted(a.agent_id for a in done.actions if a.outcome == "done") == sorted(AGENTS)
        lease = await backend.get_lease(rl.lock_id(""))
        assert lease is not None and lease.holder is None  # released at the run's end


async def test_runs_in_namespaces_lock_their_namespace_and_the_store_above(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with (
        StateStore(url) as whole,
        StateStore(url, namespace="acme") as acme,
        StateStore(url, namespace="beta") as beta,
    ):
        await _seed(whole)
        held = Held(monkeypatch)
        running = asyncio.ensure_future(apply_retention(acme, POLICY))
        await held.inside.wait()
        # another namespace: its own lock, it goes ahead
        other = await apply_retention(beta, POLICY)
        assert [a.agent_id for a in other.actions if a.outcome == "done"] == ["b1"]
        # the same namespace, or the whole store (it holds acme's agents too): refused
        with pytest.raises(RetentionRunning, match="namespace 'acme'") as refused:
            await apply_retention(acme, POLICY)
        assert refused.value.namespace == "acme"
        if whole.backend.supports(Capability.LEASE_LIST):
            with pytest.raises(RetentionRunning, match="namespace 'acme'"):
                await apply_retention(whole, POLICY)
        held.go.set()
        await running
        # and a run on the whole store refuses a run in a namespace below it
        held2 = Held(monkeypatch)
        await _seed(whole)
        running = asyncio.ensure_future(apply_retention(whole, POLICY))
        await held2.inside.wait()
        with pytest.raises(RetentionRunning, match="of the store"):
            await apply_retention(beta, POLICY)
        held2.go.set()
        await running


async def test_a_run_whose_lock_was_taken_over_stops_before_its_next_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused past its lease (a frozen machine), another run took the lock: this one
    learns it at a renewal and changes nothing more (LeaseLost)."""
    now = [time.time()]
    backend = SQLiteBackend(str(tmp_path / "s.db"), clock=lambda: now[0])
    async with StateStore(backend) as store:
        await _seed(store)
        ticks: asyncio.Queue[None] = asyncio.Queue()
        renewed = asyncio.Event()
        renew = backend.renew_lease

        async def pause(seconds: float) -> None:
            await ticks.get()  # a renewal falls due when the test says so

        async def renewing(*args: Any) -> Any:
            try:
                return await renew(*args)
            finally:
                renewed.set()

        monkeypatch.setattr(rl, "_pause", pause)
        monkeypatch.setattr(backend, "renew_lease", renewing)
        held = Held(monkeypatch)
        running = asyncio.ensure_future(apply_retention(store, POLICY))
        await held.inside.wait()
        ticks.put_nowait(None)  # renewed while the run runs
        await renewed.wait()
        renewed.clear()
        # the machine froze past the lease; another run took the lock meanwhile
        now[0] += 61.0
        await backend.acquire_lease(rl.lock_id(""), "retention run pid 2 on other (x)", 60.0)
        ticks.put_nowait(None)
        await renewed.wait()  # the renewal learned it
        held.go.set()
        with pytest.raises(LeaseLost, match="pid 2 on other"):
            await running
        # it finished the agent it was on (one atomic change), and touched no other
        sizes = {a: (await store.stored_size(a)).events for a in AGENTS}
        assert sorted(sizes.values()) == [1, 3, 3], sizes


async def test_a_run_cancelled_while_its_renewal_ends_is_cancelled_and_releases_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is cancelled (a timeout, a task group) as it ends, while its renewal
    task is ending (a renewal in flight takes a moment to cancel: a server round trip).
    Was: the run lock's wait for its renewal task swallowed the run's own cancellation
    (``suppress(CancelledError)``): the cancelled run returned its report as if never
    cancelled. Now the cancellation reaches the caller, and the lock is released."""
    ending, may_end = asyncio.Event(), asyncio.Event()

    async def pause(seconds: float) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # a renewal in flight: it ends a moment later
            ending.set()
            await may_end.wait()
            raise

    monkeypatch.setattr(rl, "_pause", pause)
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as store, StateStore(url) as other:
        await _seed(store)
        running = asyncio.ensure_future(apply_retention(store, POLICY))
        await ending.wait()  # the run is done with its agents, its renewal ending
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running  # (was: returned the report)
        assert (await store.backend.get_lease(rl.lock_id(""))).holder is None  # type: ignore[union-attr]
        await apply_retention(other, POLICY)  # the lock is free
        may_end.set()


async def test_a_run_paused_past_its_lease_stops_before_its_next_agent_without_a_renewal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frozen past its lease inside an agent; another run took the lock meanwhile; the
    run wakes before its renewal task's next turn (up to a third of the lease away).
    Was: it went on to its next agents until that renewal, alongside the run that holds
    the lock. Now a run whose lease may have expired renews it before its next agent
    (LeaseLost: it stops)."""
    now = [time.time()]
    backend = SQLiteBackend(str(tmp_path / "s.db"), clock=lambda: now[0])
    async with StateStore(backend) as store:
        await _seed(store)

        async def pause(seconds: float) -> None:
            await asyncio.Event().wait()  # no renewal comes due in this test

        monkeypatch.setattr(rl, "_pause", pause)
        held = Held(monkeypatch)
        running = asyncio.ensure_future(apply_retention(store, POLICY))
        await held.inside.wait()
        now[0] += 61.0  # frozen past the lease; another run took the lock meanwhile
        await backend.acquire_lease(rl.lock_id(""), "retention run pid 2 on other (x)", 60.0)
        held.go.set()
        with pytest.raises(LeaseLost, match="pid 2 on other"):
            await running
        # it finished the agent it was on (one atomic change), and touched no other
        sizes = {a: (await store.stored_size(a)).events for a in AGENTS}
        assert sorted(sizes.values()) == [1, 3, 3], sizes
