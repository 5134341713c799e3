"""``audit verify`` checks the changes the log records against the store, also of
agents deleted since, of snapshots, compactions and purges; what it cannot check is
counted per operation (``AuditReport.unchecked``), never passed in silence."""

from __future__ import annotations

from collections.abc import Callable

from statekeeper import StateStore
from statekeeper.backends.base import Capability
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


async def test_the_newest_lease_and_its_release_are_checked_against_the_lease_table(
    as_principal: Make,
) -> None:
    # (was: every lease entry counted as not checkable) the entry of a lease taken
    # names its fencing token; the lease table keeps the newest token of an agent
    ops = as_principal("ops")
    lease = await LeaseManager(ops, holder="w1", ttl=300).acquire("acme/g")
    tokens = [e.detail.get("token") async for e in AuditLog(ops.backend, KEYRING).entries()]
    assert tokens == [lease.token], tokens  # one entry, written ahead, naming the token
    await lease.release()
    report = await _verify(ops)
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)
    assert report.unchecked == {}
    again = await LeaseManager(ops, holder="w2", ttl=300).acquire("acme/g")
    assert again.token > lease.token
    report = await _verify(ops)
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)
    # the older lease and its release: the table no longer holds their token; each
    # committed with its change needs no check (memory, SQLite, PostgreSQL), each
    # written ahead of it (Redis) cannot be checked: counted
    together = {} if ops.backend.changes_leases_and_rewrites else {"lease": 1, "lease-release": 1}
    assert report.unchecked == together


async def test_a_lease_on_an_agent_the_log_never_leased_is_found(as_principal: Make) -> None:
    # (was: not seen: verify only compared agents that had lease entries with the
    # table) the lease table is listed (Capability.LEASE_LIST: memory, SQLite,
    # PostgreSQL) and a running lease no entry records is a problem
    ops, plain = as_principal("ops"), as_principal(None)
    await ops.save("acme/a", {"n": 1})  # the log has begun
    rogue = await LeaseManager(plain, holder="rogue", ttl=300).acquire("acme/q")
    done = await LeaseManager(plain, holder="gone", ttl=300).acquire("acme/r")
    await done.release()  # released: no expiry left to tell it from one older than the log
    report = await _verify(ops)
    if not ops.backend.supports(Capability.LEASE_LIST):  # Redis: the table is not listed
        assert report.ok and report.unchecked == {}, report
        return
    assert report.problems == [
        f"'acme/q': the lease table holds a lease (fencing token {rogue.token}, holder "
        "'rogue') no lease entry records: granted without the audit log"
    ], report.problems
    assert report.unchecked == {"lease": 1}, report.unchecked
    # a lease taken through the governed store is recorded: no problem of its own
    await LeaseManager(ops, holder="w1", ttl=300).acquire("acme/s")
    assert len((await _verify(ops)).problems) == 1


async def test_a_lease_granted_without_the_log_is_found(as_principal: Make) -> None:
    ops, plain = as_principal("ops"), as_principal(None)
    lease = await LeaseManager(ops, holder="w1", ttl=300).acquire("acme/g")
    await lease.release()
    other = await LeaseManager(plain, holder="rogue", ttl=300).acquire("acme/g")  # no entry
    report = await _verify(ops)
    assert report.problems == [
        f"'acme/g': the lease table holds fencing token {other.token}, the newest lease "
        f"entry (entry 1) records {lease.token}: a lease was granted without the audit log"
    ], report.problems


async def test_an_announced_lease_not_granted_and_a_release_not_made_are_reported(
    as_principal: Make,
) -> None:
    ops = as_principal("ops")
    lease = await LeaseManager(ops, holder="w1", ttl=300).acquire("acme/g")
    log = AuditLog(ops.backend, KEYRING)
    # a release announced and never made (the process stopped): the lease is still held
    await log.record_ahead("lease-release", principal="ops", agent_id="acme/g",
                           detail={"holder": "w1", "token": lease.token})  # fmt: skip
    report = await log.verify()
    assert report.ok, report.problems
    assert len(report.unapplied) == 1, report.unapplied
    assert "release of the lease of 'acme/g'" in report.unapplied[0], report.unapplied
    # a lease announced and never granted
    await log.record_ahead("lease", principal="ops", agent_id="acme/h",
                           detail={"holder": "w1", "token": 1})  # fmt: skip
    await LeaseManager(ops, holder="w1", ttl=300).try_acquire("acme/i")
    report = await log.verify()
    assert report.ok, report.problems
    assert len(report.unapplied) == 2, report.unapplied
    assert report.unapplied[1].startswith(
        "entry 3: the lease of 'acme/h' with fencing token 1 it records was not granted "
        "(the table holds none;"
    ), report.unapplied


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


async def test_a_thinning_names_the_snapshots_it_drops_and_verify_checks_them(
    as_principal: Make,
) -> None:
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    ops = as_principal("ops")
    for n in range(1, 9):
        await ops.save("acme/t", {"n": n})
        await ops.snapshot("acme/t")
    raws = {seq: await ops.backend.latest_snapshot("acme/t", seq) for seq in range(1, 9)}
    await apply_retention(ops, RetentionPolicy.parse("*  snapshot_every=4"))
    log = AuditLog(ops.backend, KEYRING)
    entry = [e async for e in log.entries(operation="thin")][-1]
    dropped = entry.detail["dropped"]  # (was: only a count)
    assert dropped and 4 not in dropped and 8 not in dropped, dropped
    report = await log.verify()
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)
    assert report.unchecked == {}  # (was: thin 1, and every snapshot it may have removed)
    raw = raws[dropped[0]]
    assert raw is not None
    await ops.backend.save_snapshot("acme/t", raw)  # put back, without the log
    report = await log.verify()
    what = (
        f"the thin of 'acme/t' removed the snapshots at seqs {dropped[0]}, and they are "
        "still stored"
    )
    found = report.problems if _together(ops) else report.unapplied  # (entry first: Redis)
    assert len(found) == 1 and what in found[0], (report.problems, report.unapplied)
