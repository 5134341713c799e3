"""``audit verify`` finds events of LIVE agents that no entry claims: a process that
wrote with a plain ``StateStore`` to a governed store, or an edited database. Agents
written before the log began are not findings (a store audited from some day on).

Every store of a test shares one clock (events and entries), moved by hand: which
events come before the log's first entry is set, never raced."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, AuditReport
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_env, cli_in_process
from .conftest import KEYRING

KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # KEYRING's k1

Make = Callable[..., StateStore]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += 1.0


def _stores(as_principal: Make) -> tuple[Clock, StateStore, StateStore]:
    """(the clock, a governed store as ops, a plain store without the log)."""
    clock = Clock()
    ops = as_principal("ops", clock=clock, audit=Audit(clock=clock))
    plain = as_principal(None, clock=clock)
    return clock, ops, plain


async def _verify(store: StateStore) -> AuditReport:
    return await AuditLog(store.backend, KEYRING).verify()


def _found(report: AuditReport, agent: str) -> list[str]:
    return [p for p in report.problems if p.startswith(f"{agent!r}: events ")]


async def test_events_a_plain_store_wrote_between_audited_ones_are_found(
    as_principal: Make,
) -> None:
    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/a", {"n": 1})
    await ops.save("acme/a", {"n": 2})
    clock.tick()
    await plain.save("acme/a", {"n": 3})  # no entry
    await plain.save("acme/a", {"n": 4})  # no entry
    await ops.save("acme/a", {"n": 5})
    report = await _verify(ops)
    assert not report.ok
    assert _found(report, "acme/a") == [
        "'acme/a': events 3..4 are in the store and no entry records them "
        "(written without the audit log, or edited in)"
    ], report.problems


async def test_an_agent_written_only_without_the_log_is_found(as_principal: Make) -> None:
    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/a", {"n": 1})  # the log begins
    clock.tick()
    await plain.save("acme/new", {"n": 1})
    await plain.save("acme/new", {"n": 2})
    report = await _verify(ops)
    assert len(_found(report, "acme/new")) == 1 and "events 1..2 " in report.problems[0]
    assert _found(report, "acme/a") == []


async def test_the_newest_events_written_without_the_log_are_found(as_principal: Make) -> None:
    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/a", {"n": 1})
    clock.tick()
    await plain.save("acme/a", {"n": 2})  # after the last audited event: the head
    report = await _verify(ops)
    assert ["events 2 " in p for p in _found(report, "acme/a")] == [True], report.problems


async def test_agents_written_before_the_log_began_are_not_findings(as_principal: Make) -> None:
    clock, ops, plain = _stores(as_principal)
    await plain.save("acme/old", {"n": 1})  # before any entry
    await plain.save("acme/old", {"n": 2})
    await plain.save("acme/untouched", {"n": 1})
    clock.tick()
    await ops.save("acme/old", {"n": 3})  # the log begins, at seq 3 of this agent
    await ops.save("acme/old", {"n": 4})
    report = await _verify(ops)
    assert report.ok, report.problems
    # ... but a write without the log after the first audited seq is one, clock or not
    await plain.save("acme/old", {"n": 5})
    await ops.save("acme/old", {"n": 6})
    report = await _verify(ops)
    assert ["events 5 " in p for p in _found(report, "acme/old")] == [True], report.problems


async def test_events_below_the_first_audited_one_stamped_after_the_log_began_are_found(
    as_principal: Make,
) -> None:
    clock, ops, plain = _stores(as_principal)
    await plain.save("acme/old", {"n": 1})  # before the log: fine
    clock.tick()
    await ops.save("acme/other", {"n": 1})  # the log begins
    clock.tick()
    await plain.save("acme/old", {"n": 2})  # after it, without it
    await plain.save("acme/old", {"n": 3})
    await ops.save("acme/old", {"n": 4})  # the agent's first entry
    report = await _verify(ops)
    assert ["events 2..3 " in p for p in _found(report, "acme/old")] == [True], report.problems


async def test_after_a_delete_every_event_of_the_new_stream_needs_an_entry(
    as_principal: Make,
) -> None:
    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/a", {"n": 1})
    await ops.delete("acme/a")
    await ops.save("acme/a", {"n": 1})
    assert (await _verify(ops)).ok
    # the clock goes back: events stamped before the log are still found after a delete
    clock.now = 0.0
    await plain.save("acme/a", {"n": 2})
    await ops.save("acme/a", {"n": 3})
    report = await _verify(ops)
    assert ["events 2 " in p for p in _found(report, "acme/a")] == [True], report.problems


async def test_a_compacted_stream_is_not_a_finding(as_principal: Make) -> None:
    clock, ops, plain = _stores(as_principal)
    await plain.save("acme/old", {"n": 0})  # before the log
    clock.tick()
    for n in range(1, 6):
        await ops.save("acme/a", {"n": n})
        await ops.save("acme/old", {"n": n})
    await apply_retention(ops, RetentionPolicy.parse("*  keep_last=2"))
    report = await _verify(ops)
    assert report.ok, report.problems


async def test_a_restored_agent_is_held_to_the_restore_s_time(
    as_principal: Make, tmp_path: Path
) -> None:
    import os

    from statekeeper.governance.backup import BackupKey, backup, restore

    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/x", {"n": 1})  # the target's log begins
    clock.tick()
    source = StateStore("memory://", keyring=KEYRING, clock=clock)
    await source.save("acme/r", {"n": 1})  # stamped after the target's log began
    key = BackupKey(os.urandom(32))
    await backup(source, tmp_path / "r.skb", key)
    await source.close()
    clock.tick()
    await restore(ops, [tmp_path / "r.skb"], key)  # one entry for the whole backup
    report = await _verify(ops)
    assert report.ok, report.problems  # restored, not written without the log
    clock.tick()
    await plain.save("acme/r", {"n": 2})  # after the restore, without the log
    report = await _verify(ops)
    assert ["events 2 " in p for p in _found(report, "acme/r")] == [True], report.problems


async def test_a_delete_after_a_restore_is_checked(as_principal: Make, tmp_path: Path) -> None:
    # (was: counted as not checkable) what a restore wrote is the stream below the
    # first seq an entry after it claims; every seq from there on must be claimed
    import os

    from statekeeper.governance.backup import BackupKey, backup, restore

    clock, ops, plain = _stores(as_principal)
    await ops.save("acme/x", {"n": 1})  # the target's log begins
    clock.tick()
    source = StateStore("memory://", keyring=KEYRING, clock=clock)
    for agent in ("acme/r", "acme/s"):
        await source.save(agent, {"n": 1})
    key = BackupKey(os.urandom(32))
    await backup(source, tmp_path / "r.skb", key)
    await source.close()
    clock.tick()
    await restore(ops, [tmp_path / "r.skb"], key)
    await ops.save("acme/r", {"n": 2})  # seq 2: claimed
    await ops.delete("acme/r")  # erased 1..2: 1 restored, 2 recorded
    await ops.save("acme/s", {"n": 2})  # seq 2: claimed
    clock.tick()
    await plain.save("acme/s", {"n": 3})  # seq 3: without the log
    await ops.delete("acme/s")
    report = await _verify(ops)
    assert report.problems == [
        f"entry {len([e async for e in AuditLog(ops.backend, KEYRING).entries()])}: the "
        "delete of 'acme/s' erased events (3) that no entry records (written without "
        "the audit log)"
    ], report.problems
    assert "delete" not in report.unchecked, report.unchecked


async def test_the_cli_fails_on_events_without_an_entry(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": KEY}})
    url = f"sqlite:///{tmp_path / 'a.db'}"
    ops = StateStore(url, keyring=KEYRING, principal="ops", audit=Audit())
    plain = StateStore(url, keyring=KEYRING)
    try:
        await ops.save("acme/a", {"n": 1})
        await plain.save("acme/a", {"n": 2})
    finally:
        await ops.close()
        await plain.close()
    args = ("audit", "verify", "--db", url, "--key-file", str(keys))
    run = cli_in_process(*args, env=cli_env())
    assert run.code == 1, str(run)
    assert "problem: 'acme/a': events 2 are in the store and no entry records them" in run.stdout
    as_json: dict[str, Any] = json.loads(cli_in_process(*args, "--json", env=cli_env()).stdout)
    assert as_json["ok"] is False and len(as_json["problems"]) == 1


# -- the other way round: events entries record that the store no longer holds ----------


def _gone(report: AuditReport, agent: str) -> list[str]:
    return [p for p in report.problems if p.startswith(f"{agent!r}: events ") and "not in" in p]


async def test_an_agent_a_plain_store_deleted_is_found(as_principal: Make) -> None:
    # was: "audit log: N entries, ok" after `statekeeper delete` without --as (or a
    # DELETE in the database) removed an agent whose every write the log records
    _clock, ops, plain = _stores(as_principal)
    await ops.save("acme/a", {"n": 1})
    await ops.save("acme/a", {"n": 2})
    await ops.save("acme/b", {"n": 1})
    assert (await _verify(ops)).ok
    await plain.delete("acme/a")  # no entry
    report = await _verify(ops)
    assert not report.ok
    assert report.problems == [
        "'acme/a': events 1..2 are recorded by entries and are not in the store "
        "(removed without the audit log: deleted, rolled back or edited out)"
    ], report.problems


async def test_a_stream_rolled_back_without_the_log_is_found(as_principal: Make) -> None:
    # deleted and written again without the log, shorter: every event left is one an
    # entry records, so only the missing tail tells
    _clock, ops, plain = _stores(as_principal)
    for n in range(1, 5):
        await ops.save("acme/a", {"n": n})
    await plain.delete("acme/a")
    await plain.save("acme/a", {"n": 1})
    report = await _verify(ops)
    assert ["events 2..4 " in p for p in _gone(report, "acme/a")] == [True], report.problems


async def test_removals_the_log_records_are_not_findings(as_principal: Make) -> None:
    clock, ops, _plain = _stores(as_principal)
    for agent in ("acme/deleted", "acme/again", "stale/purged", "acme/kept"):
        await ops.save(agent, {"n": 1})
        await ops.save(agent, {"n": 2})
    await ops.delete("acme/deleted")
    await ops.delete("acme/again")
    await ops.save("acme/again", {"n": 1})  # a new, shorter stream: recorded
    clock.now += 7200
    await apply_retention(ops, RetentionPolicy.parse("stale ttl=1h\nacme keep_last=1"))
    assert await ops.head("stale/purged") == 0
    report = await _verify(ops)
    assert report.ok, report.problems


async def test_an_engine_that_expires_agents_is_not_held_to_them() -> None:
    # a Redis with ttl= removes idle agents with no entry, by design: not a finding
    from statekeeper.backends.memory import MemoryBackend

    class Expiring(MemoryBackend):
        @property
        def expires_agents(self) -> bool:
            return True

    backend = Expiring()
    ops = StateStore(backend, keyring=KEYRING, principal="ops", audit=Audit())
    await ops.save("acme/a", {"n": 1})
    await backend.delete_agent("acme/a")  # as its TTL would
    report = await _verify(ops)
    assert report.ok, report.problems
    await ops.close()
