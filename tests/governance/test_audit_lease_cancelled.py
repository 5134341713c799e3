"""``LeaseManager.acquire`` on a store whose engine writes the audit entry first (Redis
Cluster, tiered; here memory and Redis told they cannot commit both at once):
cancelled after the entry was written, the acquire gives back any grant it made, but
the entry stayed unvoided — ``Governance.voided`` voided only an ``Exception``, and a
cancellation is a ``BaseException`` — so the log said a lease was granted that never
was. The entry is now voided (outcome ``error:CancelledError``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.store.governed import governance_of

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = parse_policy('[principals.app]\nwrite = ["acme/**"]\n')


@pytest.mark.parametrize("engine", ["memory", "redis"])
@pytest.mark.parametrize("when", ["grant-refused", "entry-written"])
async def test_a_cancelled_acquire_voids_its_announced_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, engine: str
) -> None:
    """Cancelled while its grant is on its way and the grant is refused (a rival took
    the lease meanwhile), or while its entry is being written: the entry is voided."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(
            url, keyring=KEYRING, principal="app", policy=POLICY, audit=Audit(), witness=False
        ) as store:
            monkeypatch.setattr(store.backend, "changes_leases_and_rewrites", False)
            manager = LeaseManager(store, holder="w1", ttl=60)
            assert manager.together() is None  # the entry goes first on this engine
            backend = store.backend
            real = backend.acquire_lease
            entered, gate = asyncio.Event(), asyncio.Event()
            if when == "grant-refused":

                async def refused(*args: Any) -> Any:
                    entered.set()
                    await gate.wait()
                    await real("acme/t1", "rival", 300)  # a rival takes it meanwhile
                    return await real(*args)

                monkeypatch.setattr(backend, "acquire_lease", refused)
            else:
                audit: Any = governance_of(store).audit  # type: ignore[union-attr]
                ahead = audit.record_ahead

                async def written(*args: Any, **kwargs: Any) -> Any:
                    seq = await ahead(*args, **kwargs)
                    entered.set()
                    await gate.wait()
                    return seq

                monkeypatch.setattr(audit, "record_ahead", written)
            log = AuditLog(backend, KEYRING)
            before = len([e async for e in log.entries()])
            task = asyncio.ensure_future(manager.acquire("acme/t1"))
            await entered.wait()
            task.cancel()
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            stored = await backend.get_lease("acme/t1")
            assert stored is None or stored.holder != "w1"  # never w1's
            added = [e async for e in log.entries()][before:]
            kinds = [(e.operation, e.outcome, e.detail) for e in added]
            assert kinds[0][:2] == ("lease", "ok") and added[0].detail.get("ahead") is True
            # (was: no void: the log said w1 was granted the lease)
            assert [(e.operation, e.outcome, e.detail.get("voids")) for e in added[1:]] == [
                ("lease", "error:CancelledError", added[0].seq)
            ], kinds
