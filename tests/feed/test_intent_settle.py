"""Settling feed intents no process can prove dead (``StateStore.settle_feed_intents``,
``statekeeper feed-intents --settle``).

An intent of another host (or of an earlier version, with no owner) is never dropped by
a delete's settle while its agent is intact, and, before, stayed for ever: ``verify``
named it on every run ("the process that began it is provably gone", which could never
come true) and nothing ended it. The intents here are crafted: written as a delete of
another host writes them (its owner fields), then the delete made and the process
"killed" before the tombstone (or not made at all)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import AccessDenied, InvalidArgument
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.audit import AuditLog
from statekeeper.store import feed_intents as fi

POLICY = parse_policy(
    '[principals.ops]\nadmin = ["**"]\n\n[principals.tenant]\nadmin = ["acme/**"]\n'
)
ELSEWHERE = {"host": "another-host", "boot": "b", "pidns": "p", "pid": 4242, "start": 7}


def split(path: Path) -> SQLiteBackend:
    """A SQLite engine whose deletes go through an intent (as on Redis Cluster, S3)."""
    found = SQLiteBackend(str(path))
    found.appends_together = False
    return found


async def craft(
    store: StateStore, agent_id: str, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> str:
    """An intent of ``owner`` for a delete of ``agent_id`` at its head; its stream."""
    head = await store.head(agent_id)
    raws = await store.backend.read(agent_id, head - 1, head)
    stream = fi.intent_stream(store.backend, agent_id)
    monkeypatch.setattr(fi, "claim_owner", lambda: owner)
    await fi._write_intent(store.backend, store.codec, stream, agent_id, head, raws[-1], False)
    monkeypatch.undo()
    return stream


async def tombstones(store: StateStore) -> list[tuple[str, int]]:
    return [(c.agent_id, c.seq) async for c in store.subscribe(stop_at_head=True) if c.deleted]


async def seed(store: StateStore) -> None:
    for n in range(2):
        for agent_id in ("acme/gone", "acme/kept", "other"):
            await store.save(agent_id, {"n": n})


async def test_an_intent_of_another_host_whose_delete_was_made_gets_its_tombstone_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        await craft(store, "acme/gone", ELSEWHERE, monkeypatch)
        await store.backend.delete_agent("acme/gone")  # killed before the tombstone
        (intent,) = await store.feed_intents()
        assert (intent.agent_id, intent.head, intent.state) == ("acme/gone", 2, "done")
        assert intent.owner == ELSEWHERE and intent.where == "host"
        assert await store.settle_feed_intents(older_than=3600.0) == []  # too young
        (done,) = await store.settle_feed_intents(["acme/gone"])
        assert done.outcome == "tombstone"
        assert await store.settle_feed_intents(["acme/gone"]) == []  # gone: once
        assert (await tombstones(store)).count(("acme/gone", 2)) == 1
        assert await store.feed_intents() == []
        assert await store.delete("other")  # (a delete's settle: nothing more)
        assert (await tombstones(store)).count(("acme/gone", 2)) == 1
        assert (await store.verify()).ok


async def test_an_intent_whose_agent_is_intact_is_dropped_with_no_tombstone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        await craft(store, "acme/kept", None, monkeypatch)  # an earlier version's: no owner
        assert await store.delete("other")
        report = await store.verify()
        (problem,) = [p for p in report.problems if p.kind == "feed"]
        assert problem.agent_id == "acme/kept"
        assert "statekeeper feed-intents --settle --older-than 1h acme/kept" in problem.reason
        assert "provably gone" not in problem.reason  # (could never come true for it)
        (intent,) = await store.feed_intents()
        assert (intent.state, intent.where) == ("intact", "unknown")
        (done,) = await store.settle_feed_intents(older_than=0.0)
        assert done.outcome == "dropped"
        assert ("acme/kept", 2) not in await tombstones(store)
        assert (await store.load("acme/kept")).data == {"n": 1}
        assert await store.feed_intents() == []
        assert (await store.verify()).ok


async def test_a_running_owner_on_this_host_is_refused_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.backends.tiered_owner import IN_FLIGHT, claim_owner

    me = claim_owner()
    if None in me.values():
        pytest.skip("no /proc: no owner is provably running")
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        stream = await craft(store, "acme/kept", me, monkeypatch)
        IN_FLIGHT.add(stream.encode())  # this process's delete, under way
        try:
            (intent,) = await store.feed_intents()
            assert intent.live
            (done,) = await store.settle_feed_intents(["acme/kept"])
            assert done.outcome == "refused" and "force" in done.reason
            assert len(await store.feed_intents()) == 1  # nothing written
            (done,) = await store.settle_feed_intents(["acme/kept"], force=True)
            assert done.outcome == "dropped"
        finally:
            IN_FLIGHT.discard(stream.encode())
        assert await store.feed_intents() == []


async def test_settling_needs_a_selection(tmp_path: Path) -> None:
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        with pytest.raises(InvalidArgument):
            await store.settle_feed_intents()
        with pytest.raises(InvalidArgument):
            await store.settle_feed_intents(older_than=-1.0)


async def test_a_governed_store_needs_admin_and_audits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.security import Keyring

    keys = Keyring({"k1": os.urandom(32)})
    path = tmp_path / "s.db"
    options: dict[str, Any] = {
        "keyring": keys,
        "policy": POLICY,
        "audit": Audit(),
        "witness": False,
    }
    async with StateStore(split(path), principal="ops", **options) as ops:
        await seed(ops)
        await craft(ops, "acme/gone", ELSEWHERE, monkeypatch)
        await ops.backend.delete_agent("acme/gone")
    async with StateStore(split(path), principal="tenant", **options) as tenant:
        with pytest.raises(AccessDenied):
            await tenant.feed_intents()
        with pytest.raises(AccessDenied):
            await tenant.settle_feed_intents(["acme/gone"])
    async with StateStore(split(path), principal="ops", **options) as ops:
        assert len(await ops.feed_intents()) == 1  # nothing settled by the tenant
        (done,) = await ops.settle_feed_intents(["acme/gone"])
        assert done.outcome == "tombstone"
        entries = [e async for e in AuditLog(ops.backend, keys).entries()]
        settled = [e for e in entries if e.operation == "settle_feed_intents"]
        assert [(e.principal, e.outcome) for e in settled] == [
            ("tenant", "denied"),
            ("ops", "ok"),
        ]
        entry = settled[-1]
        assert entry.detail["intents"] == [
            {"agent_id": "acme/gone", "head": 2, "outcome": "tombstone"}
        ]


def test_the_sync_store_settles_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SyncStateStore(split(tmp_path / "s.db"), witness=False) as store:
        for n in range(2):
            store.save("acme/kept", {"n": n})
        store._portal.call(craft(store.store, "acme/kept", ELSEWHERE, monkeypatch))
        (intent,) = store.feed_intents()
        assert intent.where == "host"
        (done,) = store.settle_feed_intents(["acme/kept"])
        assert done.outcome == "refused"  # (written a moment ago: FRESH)
        (done,) = store.settle_feed_intents(["acme/kept"], older_than=0.0)
        assert done.outcome == "dropped"
        assert store.feed_intents() == []


async def test_settling_refuses_a_tombstone_after_a_recreated_agents_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent deleted (its owner killed before the tombstone), then created again:
    the old delete's tombstone appended now would come after the new agent's events,
    and every read model would drop the live agent (was: written, "tombstone")."""
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        await craft(store, "acme/gone", ELSEWHERE, monkeypatch)
        await store.backend.delete_agent("acme/gone")  # killed before the tombstone
        await store.save("acme/gone", {"n": "again"})  # created again
        (done,) = await store.settle_feed_intents(["acme/gone"])
        assert done.outcome == "refused" and "created again" in done.reason
        assert ("acme/gone", 2) not in await tombstones(store)
        assert (await store.load("acme/gone")).data == {"n": "again"}


async def test_older_than_must_be_a_number_of_seconds(tmp_path: Path) -> None:
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        with pytest.raises(InvalidArgument):  # (was: NaN matched every intent)
            await store.settle_feed_intents(older_than=float("nan"))


async def test_a_fresh_intact_intent_named_alone_is_refused_without_an_age_or_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete of another host (or container, or an earlier version's process) that
    wrote its intent a moment ago may be under way: dropped now, and that process
    crashing after its delete, the tombstone was lost for good (was: dropped at once
    when named by agent id, with no age asked). Refused until it is older than
    ``FRESH``, or an age is given, or ``force``."""
    from statekeeper.store.feed_intent_repair import FRESH

    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        await craft(store, "acme/kept", ELSEWHERE, monkeypatch)
        await craft(store, "other", None, monkeypatch)  # an earlier version's: no owner
        done = await store.settle_feed_intents(["acme/kept", "other"])
        assert [(s.intent.agent_id, s.outcome) for s in done] == [
            ("acme/kept", "refused"),
            ("other", "refused"),
        ]
        assert all("older_than" in s.reason and "force" in s.reason for s in done)
        assert len(await store.feed_intents()) == 2  # nothing written
        assert FRESH >= 600
        (done1,) = await store.settle_feed_intents(["acme/kept"], force=True)
        assert done1.outcome == "dropped"
        (done2,) = await store.settle_feed_intents(["other"], older_than=0.0)
        assert done2.outcome == "dropped"
        assert await store.feed_intents() == []


async def test_a_governed_settle_failing_midway_still_audits_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deleted agents' intents settled at once; the second one's settle fails (the
    engine refuses it). The first one's tombstone is written and stays — a change to
    the store under a principal, which the audit log must show. Was: the entry was
    recorded only once every intent was settled: none at all."""
    from statekeeper.errors import BackendError
    from statekeeper.security import Keyring

    keys = Keyring({"k1": os.urandom(32)})
    options: dict[str, Any] = {"keyring": keys, "policy": POLICY, "audit": Audit()}
    async with StateStore(
        split(tmp_path / "s.db"), principal="ops", witness=False, **options
    ) as ops:
        await seed(ops)
        for agent_id in ("acme/gone", "other"):
            await craft(ops, agent_id, ELSEWHERE, monkeypatch)
            await ops.backend.delete_agent(agent_id)  # killed before the tombstone
        finish, calls = fi._finish, []

        async def failing_second(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[2])
            if len(calls) == 2:
                raise BackendError("the engine refused it")
            return await finish(*args, **kwargs)

        monkeypatch.setattr(fi, "_finish", failing_second)
        with pytest.raises(BackendError):
            await ops.settle_feed_intents(older_than=0.0)
        monkeypatch.undo()
        assert await tombstones(ops) == [("acme/gone", 2)]  # written, and kept
        entries = [e async for e in AuditLog(ops.backend, keys).entries()]
        (entry,) = [e for e in entries if e.operation == "settle_feed_intents"]
        assert (entry.principal, entry.outcome) == ("ops", "failed")
        assert entry.detail["error"] == "BackendError"
        assert entry.detail["intents"] == [
            {"agent_id": "acme/gone", "head": 2, "outcome": "tombstone"}
        ]


async def test_a_failed_settle_whose_audit_record_fails_too_raises_the_settle_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second intent's settle fails, then the audit record of what the first one
    wrote fails as well. The caller gets the settle's error (what failed first), with
    the audit failure noted on it. Was: the audit log's error replaced it."""
    from statekeeper.errors import BackendError
    from statekeeper.security import Keyring
    from statekeeper.store.governed import governance_of

    keys = Keyring({"k1": os.urandom(32)})
    options: dict[str, Any] = {"keyring": keys, "policy": POLICY, "audit": Audit()}
    async with StateStore(
        split(tmp_path / "s.db"), principal="ops", witness=False, **options
    ) as ops:
        await seed(ops)
        for agent_id in ("acme/gone", "other"):
            await craft(ops, agent_id, ELSEWHERE, monkeypatch)
            await ops.backend.delete_agent(agent_id)
        finish, calls = fi._finish, []

        async def failing_second(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[2])
            if len(calls) == 2:
                raise BackendError("the engine refused the tombstone")
            return await finish(*args, **kwargs)

        gov = governance_of(ops)
        assert gov is not None and gov.audit is not None
        record = gov.audit.record

        async def failing_audit(operation: str, **kwargs: Any) -> Any:
            if operation == "settle_feed_intents":
                raise BackendError("the audit log is unreachable")
            return await record(operation, **kwargs)

        monkeypatch.setattr(fi, "_finish", failing_second)
        monkeypatch.setattr(gov.audit, "record", failing_audit)
        with pytest.raises(BackendError, match="refused the tombstone") as raised:
            await ops.settle_feed_intents(older_than=0.0)
        monkeypatch.undo()
        notes = getattr(raised.value, "__notes__", [])
        assert any("audit" in n and "the audit log is unreachable" in n for n in notes), notes


async def test_a_failed_save_whose_audit_record_fails_too_raises_the_save_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a write: the engine refuses a save, then its ``error:`` audit entry
    cannot be written. The save's error is raised, the audit failure noted on it."""
    from statekeeper.errors import BackendError
    from statekeeper.security import Keyring
    from statekeeper.store.governed import governance_of

    keys = Keyring({"k1": os.urandom(32)})
    options: dict[str, Any] = {"keyring": keys, "policy": POLICY, "audit": Audit()}
    async with StateStore(
        SQLiteBackend(str(tmp_path / "s.db")), principal="ops", witness=False, **options
    ) as ops:
        await ops.save("acme/a", {"n": 0})
        gov = governance_of(ops)
        assert gov is not None and gov.audit is not None

        async def refused(*args: Any, **kwargs: Any) -> Any:
            raise BackendError("the engine refused the append")

        async def failing_audit(operation: str, **kwargs: Any) -> Any:
            raise BackendError("the audit log is unreachable")

        monkeypatch.setattr(gov.audit, "record_with", refused)  # the append with its entry
        monkeypatch.setattr(gov.audit, "record", failing_audit)
        with pytest.raises(BackendError, match="refused the append") as raised:
            await ops.save("acme/a", {"n": 1})
        monkeypatch.undo()
        notes = getattr(raised.value, "__notes__", [])
        assert any("the audit log is unreachable" in n for n in notes), notes
