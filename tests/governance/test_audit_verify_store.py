"""``audit verify`` checks the changes the log records against the store, also of
agents deleted since, of snapshots, compactions and purges; what it cannot check is
counted per operation (``AuditReport.unchecked``), never passed in silence."""

from __future__ import annotations

from collections.abc import Callable

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import ConflictError
from statekeeper.governance import AuditLog, AuditReport

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def _verify(store: StateStore) -> AuditReport:
    return await AuditLog(store.backend, KEYRING).verify()


def _together(store: StateStore) -> bool:
    return store.backend.appends_together


async def test_a_deleted_agent_s_entries_and_its_erased_head_agree(as_principal: Make) -> None:
    ops = as_principal("ops")
    await ops.save("acme/a", {"n": 1})
    await ops.save("acme/a", {"n": 2})
    await ops.snapshot("acme/a")
    await ops.delete("acme/a")
    entry = [e async for e in AuditLog(ops.backend, KEYRING).entries(operation="delete")][-1]
    erased = entry.detail.get("erased") or entry.detail["ahead"]["gone"]
    assert erased[0] == 2  # the delete names the head it erased: seq and checksum
    report = await _verify(ops)
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)
    assert report.unchecked == {}


async def test_a_write_without_the_log_is_found_when_its_agent_is_deleted(
    as_principal: Make,
) -> None:
    ops, plain = as_principal("ops"), as_principal(None)
    await ops.save("acme/a", {"n": 1})
    await ops.save("acme/a", {"n": 2})
    await plain.save("acme/a", {"n": 3})  # a store opened without the log: no entry
    await ops.delete("acme/a")
    report = await _verify(ops)
    assert any("erased events (3)" in p and "'acme/a'" in p for p in report.problems), (
        report.problems
    )


async def test_a_deleted_agent_stored_again_without_an_entry_is_found(
    as_principal: Make,
) -> None:
    ops, plain = as_principal("ops"), as_principal(None)
    await ops.save("acme/b", {"n": 1})
    await ops.delete("acme/b")
    await plain.save("acme/b", {"n": 9})  # back, with no entry writing it
    report = await _verify(ops)
    assert any("'acme/b' was deleted, and the store holds it again" in p for p in report.problems)


async def test_an_announced_append_of_a_deleted_agent_is_told_from_the_erased_head(
    as_principal: Make,
) -> None:
    # an entry written ahead of a save a crash kept from being written (seq 2), then
    # the agent deleted at seq 1: before, verify could not tell ("erased since")
    ops = as_principal("ops")
    await ops.save("acme/c", {"n": 1})
    log = AuditLog(ops.backend, KEYRING)
    await log.record_ahead("save", principal="ops", agent_id="acme/c", first_seq=2, last_seq=2,
                           ahead="00" * 32)  # fmt: skip
    await ops.delete("acme/c")
    report = await log.verify()
    assert report.ok, report.problems
    assert len(report.unapplied) == 1, report.unapplied
    assert "the save of 'acme/c' at seq 2 it records was not written" in report.unapplied[0]
    assert "erased the stream at seq 1" in report.unapplied[0]


async def test_a_snapshot_removed_without_an_entry_is_found(as_principal: Make) -> None:
    ops = as_principal("ops")
    await ops.save("acme/d", {"n": 1})
    await ops.save("acme/d", {"n": 2})
    seq = await ops.snapshot("acme/d")
    entry = [e async for e in AuditLog(ops.backend, KEYRING).entries(operation="snapshot")][-1]
    named = entry.detail.get("snapshot") or entry.detail["ahead"]["snapshot"]
    raw = await ops.backend.latest_snapshot("acme/d")
    assert raw is not None and named == [seq, raw.checksum.hex()]
    assert (await _verify(ops)).ok
    await ops.backend.prune("acme/d", 0, [seq])  # behind the log's back
    report = await _verify(ops)
    found = report.problems if _together(ops) else report.unapplied
    assert any(f"the snapshot of 'acme/d' at seq {seq}" in p for p in found), (
        report.problems,
        report.unapplied,
    )


async def test_a_snapshot_removed_by_a_later_recorded_change_is_not_a_problem(
    as_principal: Make,
) -> None:
    ops = as_principal("ops")
    await ops.save("acme/e", {"n": 1})
    await ops.snapshot("acme/e")
    await ops.delete("acme/e")
    await ops.save("acme/e", {"n": 1})  # a new stream, no snapshot
    report = await _verify(ops)
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)


async def test_an_announced_compaction_not_applied_is_reported(as_principal: Make) -> None:
    ops = as_principal("ops")
    for n in range(3):
        await ops.save("acme/f", {"n": n})
    log = AuditLog(ops.backend, KEYRING)
    await log.record_ahead("compact", principal="ops", agent_id="acme/f", first_seq=1,
                           last_seq=2, outcome="done")  # fmt: skip
    report = await log.verify()
    assert any("the compaction of 'acme/f' to seq 2" in u for u in report.unapplied), (
        report.unapplied
    )


async def test_leases_are_counted_as_not_checkable(as_principal: Make) -> None:
    ops = as_principal("ops")
    lease = await LeaseManager(ops, holder="w1", ttl=300).acquire("acme/g")
    await lease.release()
    report = await _verify(ops)
    assert report.ok
    # the lease table keeps the newest token only: nothing to check them against
    assert report.unchecked == {"lease": 1, "lease-release": 1}


async def test_a_delete_committed_with_its_entry_names_the_head_or_writes_nothing(
    as_principal: Make,
) -> None:
    from statekeeper.records import StreamChange  # (new with this test)

    ops = as_principal("ops")
    backend = ops.backend
    if not backend.appends_together:
        return  # (entry-first engines: covered by the crash tests)
    await ops.save("acme/h", {"n": 1})
    await ops.save("acme/h", {"n": 2})
    log = AuditLog(backend, KEYRING)
    before = len([e async for e in log.entries()])
    entry, _ = await log._next_entries([b'{"op": "delete"}'])
    for change in (StreamChange("acme/h", delete_at=1), StreamChange("acme/h", delete_at=3)):
        try:
            await backend.append_together([entry], [change])
        except ConflictError as exc:
            assert exc.agent_id == "acme/h"
        else:
            raise AssertionError("a delete at a head that is not the stream's was made")
    assert await backend.head("acme/h") == 2
    assert len([e async for e in log.entries()]) == before  # nor its entry
