"""Legal holds are one rule, kept in the store (issue 15, second pass): a policy file's
``hold`` lines become the store's holds when the policy is applied, so ``forget`` and
``delete`` (which never see the file) refuse them too; a wrong key cannot seal the
holds where the store's other users cannot read them; a restore says which holds it
put in force, and counts agents without the store's own streams."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.arguments import HOLDS_STREAM
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import AccessDenied, AgentOnHold, DecryptionError
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold, list_holds, remove_hold
from statekeeper.governance.hooks import GovernanceEvent
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process, one_error_line

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))

POLICY = parse_policy(
    """\
[principals.tenant]
admin = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


async def test_a_policy_files_hold_lines_stop_forget_and_delete_once_applied(
    tmp_path: Path,
) -> None:
    keys = Keyring({"k1": KEY}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    policy = RetentionPolicy.parse(
        "acme keep_last=1\nhold acme/alice\nhold legal/*\n", source="retention.policy"
    )
    events: list[GovernanceEvent] = []
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys) as store:
        for name in ("acme/alice", "acme/bob", "legal/x"):
            await store.save(name, {"n": 1})
            await store.save(name, {"n": 2})
        dry = await apply_retention(store, policy, dry_run=True)
        assert dry.holds_placed == ["acme/alice", "legal/*"]
        assert await list_holds(store) == ()  # a dry run places nothing
        report = await apply_retention(store, policy, audit=events.append)
        assert report.holds_placed == ["acme/alice", "legal/*"] and report.held == 2
        holds = {h.pattern: h.reason for h in await list_holds(store)}
        assert holds == {
            "acme/alice": "retention policy retention.policy",
            "legal/*": "retention policy retention.policy",
        }
        assert [(e.op, e.details["pattern"]) for e in events if e.op == "hold"] == [
            ("hold", "acme/alice"),
            ("hold", "legal/*"),
        ]
        # forget and delete never see the file: they see the store's holds
        with pytest.raises(AgentOnHold) as caught:
            await forget(store, "acme/alice")
        assert caught.value.hold == "acme/alice"
        with pytest.raises(AgentOnHold):
            await store.delete("legal/x")
        assert (await store.load("acme/alice")).data == {"n": 2}
        # applying it again places nothing more; a policy without the line releases nothing
        assert (await apply_retention(store, policy)).holds_placed == []
        await apply_retention(store, RetentionPolicy.parse("acme keep_last=1"))
        assert {h.pattern for h in await list_holds(store)} == {"acme/alice", "legal/*"}
        await remove_hold(store, "acme/alice", "case closed")  # the one way to release
        assert (await forget(store, "acme/alice")).destroyed


async def test_placing_a_policy_files_holds_needs_admin_and_a_refusal_touches_nothing() -> None:
    keys = Keyring({"k1": KEY})
    async with StateStore("memory://", keyring=keys) as plain:
        backend = plain.backend
        await plain.save("acme/a", {"n": 1})
        await plain.save("legal/x", {"n": 1})
        tenant = StateStore(backend, keyring=keys, principal="tenant", policy=POLICY, audit=Audit())
        later = time.time() + 3600
        with pytest.raises(AccessDenied):
            await apply_retention(
                tenant, RetentionPolicy.parse("* ttl=60s\nhold legal/*\n"), now=later
            )
        assert await plain.get("acme/a") is not None  # refused before any agent was scanned
        assert await list_holds(plain) == ()
        ops = StateStore(backend, keyring=keys, principal="ops", policy=POLICY, audit=Audit())
        report = await apply_retention(
            ops, RetentionPolicy.parse("* ttl=60s\nhold legal/*\n"), now=later
        )
        assert report.holds_placed == ["legal/*"]
        assert [a.agent_id for a in report.actions] == ["acme/a"]
        entries = [
            (e.principal, e.operation, e.outcome) async for e in AuditLog(backend, keys).entries()
        ]
        assert ("tenant", "hold", "denied") in entries and ("ops", "hold", "ok") in entries


def test_retention_apply_places_the_hold_lines_and_forget_refuses_from_the_command_line(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    db = tmp_path / "s.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    store.save("acme/alice", {"email": "alice@example.com"})
    store.close()
    common = ["--db", str(db), "--key-file", str(keys)]
    policy = tmp_path / "retention.policy"
    policy.write_text("acme keep_last=10\nhold acme/alice   # Smith v. Acme\n")
    dry = cli_in_process(
        "retention", "apply", "--policy", str(policy), "--dry-run", "--json", *common
    )
    assert dry.code == 0, str(dry)
    assert json.loads(dry.stdout)["holds_placed"] == ["acme/alice"]
    applied = cli_in_process("retention", "apply", "--policy", str(policy), *common)
    assert applied.code == 0, str(applied)
    assert "placed a legal hold on 'acme/alice'" in applied.stdout
    refused = cli_in_process("forget", "acme/alice", "--yes", *common)
    assert refused.code == 4, str(refused)
    assert f"retention policy {policy}" in one_error_line(refused)


# -- a key that cannot open the store's records cannot seal its holds ------------------


@pytest.mark.parametrize("what", ["an agent", "the audit log", "the holds"])
async def test_a_hold_under_a_key_that_cannot_open_the_store_is_refused(
    tmp_path: Path, what: str
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    right = Keyring({"k1": KEY})
    async with StateStore(url, keyring=right) as store:
        if what == "the audit log":  # the log's entries only: no agent left
            governed = StateStore(store.backend, keyring=right, audit=Audit())
            await governed.save("acme/gone", {"n": 1})
            await governed.delete("acme/gone")
        else:
            await store.save("acme/alice", {"n": 1})
        if what == "the holds":
            await add_hold(store, "legal/*", "matter 7")
            await remove_hold(store, "legal/*", "settled")
        head = await store.backend.head(HOLDS_STREAM)
    for wrong in (Keyring({"k1": OTHER}), Keyring({"k2": KEY}), None):
        said = "the key does not open this store" if wrong else "no key was given"
        async with StateStore(url, keyring=wrong) as store:
            with pytest.raises(DecryptionError, match=said):
                await add_hold(store, "acme/alice", "Smith v. Acme")
            with pytest.raises(DecryptionError):
                await remove_hold(store, "legal/*", "settled")
            assert await store.backend.head(HOLDS_STREAM) == head  # nothing written
    async with StateStore(url, keyring=right) as store:
        assert await add_hold(store, "acme/alice", "Smith v. Acme")
        with pytest.raises(AgentOnHold):
            await store.delete("acme/alice")


async def test_a_hold_in_an_empty_store_or_past_a_forgotten_agent_is_placed(
    tmp_path: Path,
) -> None:
    keys = Keyring({"k1": KEY}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys) as store:
        assert await add_hold(store, "acme/alice", "before any agent")  # nothing to lock out
        await remove_hold(store, "acme/alice", "x")
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys) as store:
        await store.save("acme/a", {"n": 1})
        await store.save("acme/b", {"n": 1})
        await forget(store, "acme/a")  # its records open with no key now: passed over
        assert await add_hold(store, "acme/b", "Smith v. Acme")


def test_the_hold_commands_refuse_the_wrong_key(tmp_path: Path) -> None:
    right, wrong = tmp_path / "keys.json", tmp_path / "other.json"
    write_key_file(right, {"active": "k1", "keys": {"k1": generate_key()}})
    write_key_file(wrong, {"active": "k1", "keys": {"k1": generate_key()}})
    db = tmp_path / "s.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(right))
    store.save("acme/alice", {"n": 1})
    store.close()
    for command in (
        ["hold", "add", "acme/alice", "--reason", "Smith v. Acme"],
        ["hold", "remove", "acme/alice"],
        ["hold", "list"],
    ):
        refused = cli_in_process(*command, "--db", str(db), "--key-file", str(wrong))
        assert refused.code == 2, str(refused)
        assert "the key does not open this store" in one_error_line(refused)
    placed = cli_in_process(
        "hold", "add", "acme/alice", "--reason", "Smith v. Acme", "--db", str(db),
        "--key-file", str(right),
    )  # fmt: skip
    assert placed.code == 0, str(placed)
    refused = cli_in_process(
        "delete", "acme/alice", "--yes", "--db", str(db), "--key-file", str(right)
    )
    assert refused.code == 4, str(refused)


# -- a restore says which holds it put in force; counts are of agents -----------------


def test_restore_prints_the_holds_it_placed_and_counts_agents_only(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    src, dst, fresh = tmp_path / "s.db", tmp_path / "t.db", tmp_path / "u.db"
    for db, agent in ((src, "acme/alice"), (dst, "acme/carol")):
        store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
        store.save(agent, {"n": 1})
        store.close()
        held = cli_in_process(
            "hold", "add", agent, "--reason", f"matter of {agent}", "--db", str(db),
            "--key-file", str(keys),
        )  # fmt: skip
        assert held.code == 0, str(held)
    bk = ["--backup-key", str(tmp_path / "backup.key")]
    made = cli_in_process(
        "backup", "--db", str(src), "--to", str(tmp_path / "b.skb"), *bk,
        "--create-backup-key", "--key-file", str(keys), "--json",
    )  # fmt: skip
    assert made.code == 0, str(made)
    summary = json.loads(made.stdout)
    assert (summary["agents"], summary["internal_streams"]) == (1, 1)  # alice; the holds
    common = ["--db", str(dst), "--key-file", str(keys)]
    done = cli_in_process("restore", str(tmp_path / "b.skb"), *bk, *common)
    assert done.code == 0, str(done)
    assert "restored and verified 1 agent(s)" in done.stdout
    assert "placed a legal hold on 'acme/alice'" in done.stdout
    # into an empty store the backup's holds stream is restored whole: listed too
    SyncStateStore(f"sqlite:///{fresh}").close()
    common = ["--db", str(fresh), "--key-file", str(keys)]
    done = cli_in_process("restore", str(tmp_path / "b.skb"), *bk, *common, "--json")
    assert done.code == 0, str(done)
    restored = json.loads(done.stdout)
    assert (restored["agents"], restored["internal_streams"]) == (1, 1)
    assert restored["holds_placed"] == ["acme/alice"]


@pytest.mark.parametrize("target_has_holds", [False, True])
async def test_the_restore_result_names_the_holds_and_counts_agents_only(
    tmp_path: Path, target_has_holds: bool
) -> None:
    from statekeeper.governance.backup import BackupKey, backup, restore

    keys = Keyring({"k1": KEY})
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys) as plain:
        src = StateStore(plain.backend, keyring=keys, audit=Audit())  # with an audit log
        await src.save("acme/alice", {"n": 1})
        await src.save("acme/bob", {"n": 1})
        await add_hold(src, "acme/alice", "Smith v. Acme")
        made = await backup(src, file, bkey)
        assert (made.agents, made.internal) == (2, 2)  # the audit log and the holds apart
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys) as dst:
        if target_has_holds:
            await dst.save("acme/carol", {"n": 1})
            await add_hold(dst, "acme/carol", "Roe v. Acme")
        result = await restore(dst, [file], bkey)
        assert result.agents == 2
        assert result.internal == (1 if target_has_holds else 2)  # (its own holds kept)
        assert result.holds_placed == ["acme/alice"]
