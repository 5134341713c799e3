"""Legal holds kept in the store (issue 15: a hold exempts an agent "from every purge"):
``forget``, ``delete``, retention and expiry see a hold whether or not the caller passes
the retention policy file; placing and releasing one is audited and needs admin."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.arguments import HOLDS_STREAM
from statekeeper.codec.datakeys import MemoryKeyVault, SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import (
    AccessDenied,
    AgentNotFound,
    AgentOnHold,
    IntegrityError,
    InvalidArgument,
)
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold, list_holds, remove_hold
from statekeeper.governance.hooks import GovernanceEvent
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget
from statekeeper.schema import TypedStates
from statekeeper.schema.expiry import expire
from statekeeper.schema.structures import Session
from tests.keyfiles import write_key_file

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process, one_error_line

ENGINES = ["memory", "sqlite", "postgresql", "redis"]
KEY = bytes(range(32))

POLICY = parse_policy(
    """\
[principals.alice]
read = ["acme/**"]
write = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


def ring(vault: object = None) -> Keyring:
    return Keyring({"k1": KEY}, data_keys=vault or MemoryKeyVault())


@pytest.mark.parametrize("engine", ENGINES)
async def test_forget_and_delete_refuse_a_held_agent_on_every_engine(
    tmp_path: Path, engine: str
) -> None:
    keys = ring(SqliteKeyVault(tmp_path / "vault.db"))
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keys) as store:
            for name in ("acme/alice", "acme/bob", "legal/x"):
                await store.save(name, {"email": f"{name}@example.com"})
            assert await add_hold(store, "acme/alice", "Smith v. Acme")
            assert await add_hold(store, "legal/*", "matter 7")
            assert not await add_hold(store, "legal/*", "again")  # held already
            with pytest.raises(AgentOnHold) as caught:
                await forget(store, "acme/alice")
            assert caught.value.agent_id == "acme/alice"
            assert caught.value.hold == "acme/alice" and caught.value.operation == "forget"
            assert "Smith v. Acme" in str(caught.value)
            with pytest.raises(AgentOnHold) as caught:
                await forget(store, "legal/x", purge=True)
            assert caught.value.hold == "legal/*"
            with pytest.raises(AgentOnHold):
                await store.delete("acme/alice")
            # nothing was destroyed: the key opens, the records are there
            assert (await store.load("acme/alice")).data["email"] == "acme/alice@example.com"
            assert (await store.load("legal/x")).seq == 1
            # the holds' stream is the store's own: not an agent
            listed = [i.agent_id async for i in store.iter_agents()]
            assert listed == ["acme/alice", "acme/bob", "legal/x"]
            assert await store.count_agents() == 3
            assert (await store.verify()).ok
            # an agent not held goes as before
            assert (await forget(store, "acme/bob")).destroyed
        if engine == "memory":
            return
        # another store object (another process): the holds are in the store
        async with StateStore(url, keyring=ring(SqliteKeyVault(tmp_path / "vault.db"))) as again:
            assert [h.pattern for h in await list_holds(again)] == ["acme/alice", "legal/*"]
            with pytest.raises(AgentOnHold):
                await again.delete("legal/x")
            assert await remove_hold(again, "acme/alice", "case closed")
            assert not await remove_hold(again, "acme/alice")
            assert (await forget(again, "acme/alice", purge=True)).purged
            with pytest.raises(AgentNotFound):
                await again.load("acme/alice")


async def test_retention_without_the_policy_file_holds_still_spares_a_held_agent() -> None:
    async with StateStore("memory://") as store:
        for name in ("acme/alice", "acme/bob", "legal/x"):
            await store.save(name, {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
        await add_hold(store, "legal/*", "matter 7")
        later = time.time() + 3600
        report = await apply_retention(store, RetentionPolicy.parse("* ttl=60s"), now=later)
        assert report.held == 2
        assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/bob", "done")]
        assert [i.agent_id async for i in store.iter_agents()] == ["acme/alice", "legal/x"]
        # the policy file's own hold lines are still honoured
        await store.save("other/y", {"n": 1})
        report = await apply_retention(
            store, RetentionPolicy.parse("* ttl=60s\nhold other/y\n"), now=later
        )
        assert report.held == 3 and report.actions == []


async def test_expiry_passes_over_a_held_session_and_opening_it_keeps_it() -> None:
    now = time.time()
    stale = Session(user_id="u-1", started_at=now - 30, last_seen=now - 30, ttl=60)
    async with StateStore("memory://") as store:
        sessions = TypedStates(store, Session)
        await sessions.save("s/held", stale)
        await sessions.save("s/free", stale)
        await add_hold(store, "s/held", "litigation")
        assert await expire(store, Session, now=now + 45) == ["s/free"]
        assert await store.get("s/held") is not None
        # opening an expired, held session does not purge it
        agent = await store.agent(
            "s/held", model=Session, initial_state=Session(user_id="u-2", started_at=now)
        )
        assert agent.seq == 1 and (await store.load("s/held")).seq == 1


async def test_holds_are_audited_need_admin_and_refusals_are_recorded() -> None:
    keys = ring()
    async with StateStore("memory://", keyring=keys) as plain:
        backend = plain.backend
        alice = StateStore(backend, keyring=keys, principal="alice", policy=POLICY, audit=Audit())
        ops = StateStore(backend, keyring=keys, principal="ops", policy=POLICY, audit=Audit())
        await alice.save("acme/t1", {"secret": "x"})
        with pytest.raises(AccessDenied):
            await add_hold(alice, "acme/t1", "mine")  # write is not enough to hold
        await add_hold(ops, "acme/t1", "Smith v. Acme")
        with pytest.raises(AgentOnHold):
            await forget(ops, "acme/t1")
        with pytest.raises(AgentOnHold):
            await alice.delete("acme/t1")
        with pytest.raises(AccessDenied):
            await remove_hold(alice, "acme/t1")
        await remove_hold(ops, "acme/t1", "case closed")
        log = AuditLog(backend, keys)
        entries = [(e.principal, e.operation, e.outcome) async for e in log.entries()]
        assert ("alice", "hold", "denied") in entries
        assert ("ops", "hold", "ok") in entries
        assert ("ops", "forget", "refused") in entries
        assert ("alice", "delete", "error:AgentOnHold") in entries
        assert ("ops", "release-hold", "ok") in entries
        assert (await log.verify()).ok


@pytest.mark.parametrize("namespace", [None, "acme"])
async def test_a_refused_hold_of_a_namespace_names_the_pattern_not_a_made_up_agent(
    namespace: str | None,
) -> None:
    """Holding (or releasing) ``globex/*`` without ``admin`` on ``globex``: the
    refusal names the namespace and the pattern asked about — no agent ``globex/x``
    that nobody named — in the error and in the audit log; a store opened in a
    namespace says the same (patterns are full ids there too)."""
    keys = ring()
    async with StateStore("memory://", keyring=keys) as plain:
        where = {"namespace": namespace} if namespace else {}
        alice = StateStore(
            plain.backend, keyring=keys, principal="alice", policy=POLICY, audit=Audit(), **where
        )
        for change in (add_hold, remove_hold):
            with pytest.raises(AccessDenied) as caught:
                await change(alice, "globex/*", "a matter")
            message = str(caught.value)
            assert "globex/x" not in message, message
            assert "'globex/*'" in message and "admin on namespace 'globex'" in message
            assert caught.value.agent_id is None and caught.value.namespace == "globex"
        with pytest.raises(AccessDenied, match="'globex/eu/g1'"):  # an agent: named as given
            await add_hold(alice, "globex/eu/g1", "a matter")
        log = AuditLog(plain.backend, keys)
        denied = [e async for e in log.entries() if e.outcome == "denied"]
        assert [(e.operation, e.agent_id) for e in denied] == [
            ("hold", None),
            ("release-hold", None),
            ("hold", "globex/eu/g1"),
        ]
        assert [e.detail.get("pattern") for e in denied[:2]] == ["globex/*", "globex/*"]


async def test_a_tampered_holds_stream_fails_every_purge_instead_of_guessing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=Keyring({"k1": KEY})) as store:
        await store.save("acme/alice", {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
        await add_hold(store, "acme/other", "unrelated")
    # someone with write access to the database edits the first hold's record
    db = sqlite3.connect(tmp_path / "s.db")
    with db:
        db.execute(
            "UPDATE sk_events SET payload = substr(payload, 1, length(payload) - 1)"
            " || x'00' WHERE agent_id = ? AND seq = 1",
            (HOLDS_STREAM,),
        )
    db.close()
    async with StateStore(url, keyring=Keyring({"k1": KEY})) as store:
        with pytest.raises(IntegrityError):
            await store.delete("acme/alice")
        assert (await store.load("acme/alice")).seq == 1


@pytest.mark.parametrize("pattern", ["", "*", "acme/*/x", "acme*", "/*", "\x01sk-x/y"])
async def test_a_bad_pattern_or_missing_reason_is_refused(pattern: str) -> None:
    async with StateStore("memory://") as store:
        with pytest.raises(InvalidArgument):
            await add_hold(store, pattern, "why")
        with pytest.raises(InvalidArgument):
            await add_hold(store, "acme/alice", "  ")
        assert await list_holds(store) == ()


def test_the_hold_commands_and_the_refusal_from_the_command_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    db = tmp_path / "s.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    store.save("acme/alice", {"email": "alice@example.com"})
    store.save("acme/bob", {"email": "bob@example.com"})
    store.close()
    common = ["--db", str(db), "--key-file", str(keys)]
    placed = cli_in_process("hold", "add", "acme/alice", "--reason", "Smith v. Acme", *common)
    assert placed.code == 0, str(placed)
    refused = cli_in_process("forget", "acme/alice", "--yes", *common)
    line = one_error_line(refused)
    assert refused.code == 4, str(refused)  # as a refusal of the policy (AccessDenied)
    assert "'acme/alice'" in line and "legal hold" in line and "Smith v. Acme" in line
    assert cli_in_process("delete", "acme/alice", "--yes", *common).code == 4
    assert cli_in_process("show", "acme/alice", *common).code == 0  # nothing destroyed
    listed = cli_in_process("hold", "list", "--json", *common)
    assert [(h["pattern"], h["reason"]) for h in json.loads(listed.stdout)] == [
        ("acme/alice", "Smith v. Acme")
    ]
    no_reason = cli_in_process("hold", "add", "acme/bob", *common)
    assert no_reason.code == 2 and "--reason" in no_reason.stderr
    released = cli_in_process("hold", "remove", "acme/alice", "--reason", "closed", *common)
    assert released.code == 0, str(released)
    again = cli_in_process("hold", "remove", "acme/alice", *common)
    assert again.code == 0 and "nothing to release" in again.stdout
    assert cli_in_process("forget", "acme/alice", "--yes", *common).code == 0


@pytest.mark.parametrize("vault", [False, True])
async def test_a_key_rotation_re_encrypts_the_holds_so_the_old_key_can_retire(
    tmp_path: Path, vault: bool
) -> None:
    from statekeeper.security.rekey import key_usage, rekey

    url = f"sqlite:///{tmp_path / 's.db'}"
    old, new = KEY, bytes(range(1, 33))
    data_keys = SqliteKeyVault(tmp_path / "vault.db") if vault else None
    async with StateStore(url, keyring=Keyring({"k1": old}, data_keys=data_keys)) as store:
        await store.save("acme/alice", {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
    both = Keyring({"k1": old, "k2": new}, active="k2", data_keys=data_keys)
    async with StateStore(url, keyring=both) as store:
        await rekey(store)
        assert set(await key_usage(store)) == {"k2"}  # the holds' records counted too
    data_keys = SqliteKeyVault(tmp_path / "vault.db") if vault else None
    async with StateStore(url, keyring=Keyring({"k2": new}, data_keys=data_keys)) as store:
        assert [h.pattern for h in await list_holds(store)] == ["acme/alice"]
        with pytest.raises(AgentOnHold):
            await store.delete("acme/alice")


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_backup_carries_the_holds_into_the_store_it_restores(
    tmp_path: Path, engine: str
) -> None:
    import os

    from statekeeper.governance.backup import BackupKey, backup, restore

    keys = Keyring({"k1": KEY})
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keys) as src:
            await src.save("acme/alice", {"n": 1})
            await src.save("acme/bob", {"n": 1})
            await add_hold(src, "acme/alice", "Smith v. Acme")
            await backup(src, file, bkey)
    async with StateStore(f"sqlite:///{tmp_path / 'target.db'}", keyring=keys) as dst:
        await restore(dst, [file], bkey)
        assert [h.pattern for h in await list_holds(dst)] == ["acme/alice"]
        with pytest.raises(AgentOnHold):
            await dst.delete("acme/alice")
        assert await dst.delete("acme/bob")


@pytest.mark.parametrize("skip_existing", [False, True])
async def test_a_restore_into_a_store_with_holds_of_its_own_keeps_the_backups_holds(
    tmp_path: Path, skip_existing: bool
) -> None:
    import os

    from statekeeper.governance.backup import BackupKey, backup, restore

    keys = Keyring({"k1": KEY})
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", keyring=keys) as src:
        await src.save("acme/alice", {"n": 1})
        await src.save("acme/bob", {"n": 1})
        await add_hold(src, "acme/alice", "Smith v. Acme")
        await add_hold(src, "legal/*", "Doe v. Acme")
        await remove_hold(src, "legal/*", "settled")  # released in the backup: not carried
        await backup(src, file, bkey)
    events: list[GovernanceEvent] = []
    async with StateStore(f"sqlite:///{tmp_path / 'target.db'}", keyring=keys) as dst:
        await dst.save("acme/carol", {"n": 1})
        await add_hold(dst, "acme/carol", "Roe v. Acme")  # the target's own holds stream
        if skip_existing:
            await dst.save("acme/bob", {"n": 2})  # a live store: bob left as it is
        await restore(dst, [file], bkey, skip_existing=skip_existing, audit=events.append)
        holds = {h.pattern: h.reason for h in await list_holds(dst)}
        assert set(holds) == {"acme/carol", "acme/alice"}
        assert holds["acme/alice"] == "Smith v. Acme"  # as placed (the backup is named apart)
        with pytest.raises(AgentOnHold, match=r"Smith v\. Acme"):
            await dst.delete("acme/alice")
        with pytest.raises(AgentOnHold):
            await forget(dst, "acme/alice")
        assert (await dst.load("acme/alice")).data == {"n": 1}
        placed = [e for e in events if e.op == "hold"]
        assert [(e.agent_id, e.details["reason"]) for e in placed] == [
            ("acme/alice", holds["acme/alice"])
        ]
        assert [e.details.get("holds_placed") for e in events if e.op == "restore"] == [
            ["acme/alice"]
        ]
        # the same backup again over what it restored: the holds match, nothing more placed
        await restore(dst, [file], bkey, skip_existing=True, audit=events.append)
        assert [e.op for e in events] == ["hold", "restore", "restore"]
        assert {h.pattern for h in await list_holds(dst)} == {"acme/carol", "acme/alice"}


def test_the_restore_command_into_a_store_with_holds_keeps_the_backups_holds(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    src, dst = tmp_path / "s.db", tmp_path / "t.db"
    for db, agent in ((src, "acme/alice"), (dst, "acme/carol")):
        store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
        store.save(agent, {"n": 1})
        store.close()
        common = ["--db", str(db), "--key-file", str(keys)]
        held = cli_in_process("hold", "add", agent, "--reason", f"matter of {agent}", *common)
        assert held.code == 0, str(held)
    bk = ["--backup-key", str(tmp_path / "backup.key")]
    made = cli_in_process(
        "backup", "--db", str(src), "--to", str(tmp_path / "b.skb"), *bk,
        "--create-backup-key", "--key-file", str(keys),
    )  # fmt: skip
    assert made.code == 0, str(made)
    common = ["--db", str(dst), "--key-file", str(keys)]
    done = cli_in_process("restore", str(tmp_path / "b.skb"), *bk, *common)
    assert done.code == 0, str(done)
    refused = cli_in_process("delete", "acme/alice", "--yes", *common)
    assert refused.code == 4 and "matter of acme/alice" in one_error_line(refused)
    assert cli_in_process("show", "acme/alice", *common).code == 0


async def test_under_row_level_security_every_role_sees_the_holds_none_but_admin_changes_them(
    tmp_path: Path,
) -> None:
    import uuid

    import psycopg

    from statekeeper.backends.postgres import PostgresBackend
    from statekeeper.governance.policy_postgres import enforce_in_postgres

    from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
    from .conftest import KEYRING, POLICY_TEXT

    require_postgres()
    schema = namespace(tmp_path, "sk_holds_")
    bob_role = f"sk_holds_bob_{uuid.uuid4().hex[:8]}"
    scheme, rest = POSTGRES_DSN.split("://", 1)
    as_bob = f"{scheme}://{bob_role}@{rest.split('@', 1)[-1]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{bob_role}" LOGIN')  # type: ignore[arg-type]
    try:
        async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
            await owner.save("globex/eu/g1", {"n": 1})
            await add_hold(owner, "globex/eu/g1", "Smith v. Globex")
        policy = parse_policy(POLICY_TEXT)  # bob writes globex/*
        await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"bob": bob_role})
        url = f"{as_bob}?schema={schema}"
        async with StateStore(url, keyring=KEYRING, principal="bob", policy=policy) as bob:
            assert [h.pattern for h in await list_holds(bob)] == ["globex/eu/g1"]
            with pytest.raises(AgentOnHold):
                await bob.delete("globex/eu/g1")  # the hold is seen through the role
        raw = PostgresBackend(as_bob, schema=schema, max_size=1)
        try:  # a process as bob cannot drop the holds below the store either
            with pytest.raises(AccessDenied, match="row-level security"):
                await raw.delete_agent(HOLDS_STREAM)
        finally:
            await raw.close()
        async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
            assert [h.pattern for h in await list_holds(owner)] == ["globex/eu/g1"]
            assert (await owner.load("globex/eu/g1")).seq == 1
    finally:
        drop_schema(schema)
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{bob_role}"')  # type: ignore[arg-type]
            conn.execute(f'DROP ROLE "{bob_role}"')  # type: ignore[arg-type]
