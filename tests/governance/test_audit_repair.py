"""A repair that rebuilds a damaged snapshot is a mutation like any other: recorded in
the audit log (who, which agent, which record), and ``audit verify`` takes the rebuilt
record as the replacement of the damaged one.

Before, ``repair(store, apply=True)`` (``statekeeper repair --apply``, the inspector's
repair button) wrote the rebuilt snapshots below the store without an entry, and after
it ``audit verify`` failed for good: the entry of the original snapshot named a record
no longer in the store, and nothing recorded why."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import AuditLog
from statekeeper.store.repair import repair

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def test_a_repair_is_audited_and_audit_verify_accepts_the_rebuilt_snapshot(
    as_principal: Make,
) -> None:
    ops = as_principal("ops")
    for n in range(3):
        await ops.save("acme/support/t1", {"n": n})
    seq = await ops.snapshot("acme/support/t1")
    raw = await ops.backend.latest_snapshot("acme/support/t1")
    assert raw is not None and raw.seq == seq
    damaged = dataclasses.replace(raw, payload=raw.payload[:-4] + b"\0\0\0\0")
    await ops.backend.save_snapshot("acme/support/t1", damaged)  # the disk's doing
    assert [p.kind for p in (await ops.verify(["acme/support/t1"])).problems] == ["snapshot"]

    alice = as_principal("alice")  # reads acme, writes acme/support: not admin
    with pytest.raises(AccessDenied):
        await repair(alice, ["acme/support/t1"], apply=True)

    report = await repair(ops, apply=True)
    assert [c.seq for c in report.changes] == [seq]
    assert (await ops.verify()).ok
    rebuilt = await ops.backend.latest_snapshot("acme/support/t1")
    assert rebuilt is not None and rebuilt.seq == seq

    log = AuditLog(ops.backend, KEYRING)
    repairs = [e async for e in log.entries(operation="repair")]
    assert [(e.principal, e.outcome, e.agent_id) for e in repairs] == [
        ("alice", "denied", "acme/support/t1"),
        ("ops", "ok", "acme/support/t1"),
    ]
    named = repairs[-1].detail.get("snapshot") or repairs[-1].detail["ahead"]["snapshot"]
    assert named == [seq, rebuilt.checksum.hex()]
    verified = await log.verify()
    assert verified.ok and not verified.unapplied, (verified.problems, verified.unapplied)


async def test_a_dry_run_writes_no_entry(as_principal: Make) -> None:
    ops = as_principal("ops")
    await ops.save("acme/d", {"n": 1})
    seq = await ops.snapshot("acme/d")
    raw = await ops.backend.latest_snapshot("acme/d")
    assert raw is not None
    await ops.backend.save_snapshot("acme/d", dataclasses.replace(raw, checksum=b"\1" * 32))
    report = await repair(ops)
    assert [c.seq for c in report.changes] == [seq] and not report.applied
    log = AuditLog(ops.backend, KEYRING)
    assert [e async for e in log.entries(operation="repair")] == []
