"""``LeaseManager.acquire`` cancelled while its grant is being made (``asyncio.wait_for``
timing out, a cancelled task group, Ctrl-C in the sync face). The request is not
interrupted — a SQLite writer thread cannot be, a server may already have applied it —
so the grant committed, and the caller, cancelled, never got a ``Lease`` to release it:
the lease stayed held for its whole TTL and every other worker was refused
(``LeaseHeld``). A grant made for a cancelled acquire is now given back before the
cancellation is raised."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.governance import Audit, parse_policy

from ..backends._services import fresh_url
from ..governance._keyring import KEYRING

AGENT = "tenant/job"
POLICY = '[principals.w]\nwrite = ["tenant/**"]\n'


def _granted_then_held(
    monkeypatch: pytest.MonkeyPatch, target: Any, method: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """``target.<method>`` makes its grant, then waits for ``gate`` before it answers
    (``granted`` set meanwhile): a caller cancelled in that window."""
    real = getattr(target, method)
    granted, gate = asyncio.Event(), asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        granted.set()
        await gate.wait()
        return result

    monkeypatch.setattr(target, method, held)
    return granted, gate


async def _cancelled(task: asyncio.Task[Any]) -> None:
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_cancelled_acquire_leaves_no_lease_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            granted, gate = _granted_then_held(monkeypatch, store.backend, "acquire_lease")
            task = asyncio.ensure_future(LeaseManager(store, holder="w1", ttl=60).acquire(AGENT))
            await granted.wait()
            task.cancel()
            gate.set()
            await _cancelled(task)
            stored = await store.backend.get_lease(AGENT)
            assert stored is not None and stored.holder is None  # (was: w1's, for 60 s)
            other = await LeaseManager(store, holder="w2", ttl=60).acquire(AGENT)
            assert other.token == stored.token + 1


async def test_a_cancelled_acquire_on_a_busy_sqlite_writer_leaves_no_lease_held(
    tmp_path: Path,
) -> None:
    """The real case: the grant waits on the writer thread for a lock another
    connection holds; the caller gives up; the thread commits the grant after."""
    path = tmp_path / "store.db"
    async with StateStore(f"sqlite:///{path}") as store:
        await store.save("warm", {})
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            task = asyncio.ensure_future(LeaseManager(store, holder="w1", ttl=60).acquire(AGENT))
            busy = store.backend._writer_busy  # type: ignore[attr-defined]
            for _ in range(2000):  # until the grant waits for the lock on the writer thread
                await asyncio.sleep(0.005)
                if busy.locked():
                    break
            assert busy.locked()
            task.cancel()
            other.execute("COMMIT")
        finally:
            other.close()
        await _cancelled(task)
        stored = await store.backend.get_lease(AGENT)
        assert stored is not None and stored.holder is None
        assert await LeaseManager(store, holder="w2").try_acquire(AGENT) is not None


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_cancelled_audited_acquire_leaves_no_lease_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """The grant committed with its audit entry (``append_together``); its give-back is
    audited as a release."""
    with fresh_url(engine, tmp_path) as url:
        store = StateStore(
            url, keyring=KEYRING, principal="w", policy=parse_policy(POLICY), audit=Audit(),
            witness=False,
        )  # fmt: skip
        async with store:
            manager = LeaseManager(store, holder="w1", ttl=60)
            log = manager.together()
            assert log is not None
            granted, gate = _granted_then_held(monkeypatch, log, "record_with_change")
            task = asyncio.ensure_future(manager.acquire(AGENT))
            await granted.wait()
            task.cancel()
            gate.set()
            await _cancelled(task)
            stored = await store.backend.get_lease(AGENT)
            assert stored is not None and stored.holder is None and stored.token == 1
            assert await LeaseManager(store, holder="w2").try_acquire(AGENT) is not None
