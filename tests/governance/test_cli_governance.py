"""The governance commands end to end: forget, backup, restore, retention apply.

The first test runs every command in a real process, as a user does; the others run
one command per test in a real process and the rest in this process (``cli_in_process``:
a fresh interpreter costs seconds on a loaded machine)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from statekeeper import StateStore, SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import AuditLog
from tests.keyfiles import write_key_file

from ..cli._subprocess import Run, cli, cli_in_process, one_error_line


def key_file_with_vault(folder: Path) -> Path:
    path = folder / "keys.json"
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    return path


def test_backup_forget_restore_from_the_command_line(tmp_path: Path) -> None:
    keys = key_file_with_vault(tmp_path)
    db = tmp_path / "live.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    for i in range(5):
        store.save(f"acme/u{i}", {"email": f"u{i}@example.com"})
    store.close()
    common = ["--key-file", str(keys)]
    made = cli(
        "backup", f"sqlite:///{db}", "--to", str(tmp_path / "b.skb"),
        "--backup-key", str(tmp_path / "backup.key"), "--create-backup-key", "--json", *common,
    )  # fmt: skip
    assert made.code == 0, str(made)
    assert json.loads(made.stdout)["agents"] == 5
    gone = cli("forget", "acme/u1", "--yes", "--db", str(db), "--json", *common)
    assert gone.code == 0 and json.loads(gone.stdout)["key_destroyed"], str(gone)
    shown = cli("show", "acme/u1", "--db", str(db), *common)
    assert shown.code != 0 and "forgotten" in one_error_line(shown)
    checked = cli("verify", "--db", str(db), "--json", *common)
    assert checked.code == 0 and json.loads(checked.stdout)["forgotten"] == ["acme/u1"]
    typo = cli("forget", "acme/nobody", "--yes", "--db", str(db), *common)
    assert typo.code == 1 and "not found" in one_error_line(typo)
    target = tmp_path / "restored.db"
    assert cli("init", f"sqlite:///{target}").code == 0
    bk = ["--backup-key", str(tmp_path / "backup.key")]
    restored = cli("restore", str(tmp_path / "b.skb"), "--to", str(target), "--json", *bk, *common)
    assert restored.code == 0, str(restored)
    out = json.loads(restored.stdout)
    assert out["agents"] == 4 and out["forgotten"] == ["acme/u1"]
    # a damaged backup restores nothing: one line, exit 2
    data = bytearray((tmp_path / "b.skb").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "bad.skb").write_bytes(bytes(data))
    other = tmp_path / "other.db"
    assert cli("init", f"sqlite:///{other}").code == 0
    bad = cli("restore", str(tmp_path / "bad.skb"), "--to", str(other), *bk, *common)
    assert bad.code == 2 and "backup" in one_error_line(bad), str(bad)
    listed = cli("agents", "--db", str(other), *common)
    assert "no agents" in listed.stdout
    # the store's own key is refused as a backup key
    same = cli("backup", "--db", str(db), "--to", str(tmp_path / "c.skb"), "--backup-key",
               str(keys), *common)  # fmt: skip
    assert same.code == 2 and "store's key" in one_error_line(same)
    assert not (tmp_path / "c.skb").exists()


def test_retention_apply_dry_run_then_for_real(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SyncStateStore(f"sqlite:///{db}", snapshot_every=3)
    for i in range(10):
        store.save("acme/a", {"i": i})
        store.save("acme/hold", {"i": i})
    store.close()
    policy = tmp_path / "retention.policy"
    policy.write_text("acme keep_last=2\nhold acme/hold\n")
    dry = cli("retention", "apply", "--policy", str(policy), "--db", str(db), "--dry-run")
    assert dry.code == 0, str(dry)
    assert "acme/a: would remove 8 event(s)" in dry.stdout and "1 on legal hold" in dry.stdout
    done = cli_in_process("retention", "apply", "--policy", str(policy), "--db", str(db), "--json",
               "--progress-file", str(tmp_path / "p.json"))  # fmt: skip
    assert done.code == 0, str(done)
    assert [a["agent_id"] for a in json.loads(done.stdout)["actions"]] == ["acme/a"]
    assert not (tmp_path / "p.json").exists()  # finished: nothing to resume
    verified = cli_in_process("verify", "--db", str(db))
    assert verified.code == 0, str(verified)
    policy.write_text("acme keep_last=2\nacme ttl=1d\n")
    bad = cli_in_process("retention", "apply", "--policy", str(policy), "--db", str(db))
    assert bad.code == 2 and f"{policy}:2:" in one_error_line(bad)


def test_backup_and_restore_as_a_principal_check_the_policy(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.reader]\nread = ["**"]\n\n[principals.ops]\nadmin = ["**"]\n')
    db, target = tmp_path / "live.db", tmp_path / "restored.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    store.save("acme/u1", {"n": 1})
    store.close()
    common = ["--key-file", str(keys)]
    bk = ["--backup-key", str(tmp_path / "backup.key"), "--create-backup-key"]

    def as_(principal: str, *args: str, real: bool = False) -> Run:
        run: Callable[..., Run] = cli if real else cli_in_process
        return run("--as", principal, "--policy", str(policy), *args, *common)

    refused = as_("reader", "backup", "--db", str(db), "--to", str(tmp_path / "r.skb"), *bk)
    assert refused.code == 4 and "every namespace" in one_error_line(refused), str(refused)
    assert not (tmp_path / "r.skb").exists()
    made = as_("ops", "backup", "--db", str(db), "--to", str(tmp_path / "b.skb"), *bk, real=True)
    assert made.code == 0, str(made)
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    bk = bk[:2]
    denied = as_("reader", "restore", str(tmp_path / "b.skb"), "--to", str(target), *bk)
    assert denied.code == 4 and "admin" in one_error_line(denied), str(denied)
    done = as_("ops", "restore", str(tmp_path / "b.skb"), "--to", str(target), "--json", *bk)
    assert done.code == 0 and json.loads(done.stdout)["agents"] == 1, str(done)
    ring = Keyring.from_file(keys)
    for path, expected in (
        (db, [("reader", "backup", "denied"), ("ops", "backup", "ok")]),
        (
            target,
            [
                ("reader", "restore", "denied"),
                ("ops", "restore", "started"),
                ("ops", "restore", "ok"),
            ],
        ),
    ):
        entries = asyncio.run(_listed(f"sqlite:///{path}", ring))
        assert [e for e in entries if e[1] in ("backup", "restore")] == expected


async def _listed(url: str, ring: Keyring) -> list[tuple[str | None, str, str]]:
    async with StateStore(url, keyring=ring) as store:
        log = AuditLog(store.backend, ring)
        return [(e.principal, e.operation, e.outcome) async for e in log.entries()]


def test_keys_vault_init_sets_up_crypto_shredding(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    assert cli_in_process("keys", "generate", "--key-file", str(keys)).code == 0
    made = cli("keys", "vault", "init", str(keys))
    assert made.code == 0, str(made)
    assert json.loads(keys.read_text())["data_keys"] == "keys.vault.db"
    assert (tmp_path / "keys.vault.db").stat().st_mode & 0o077 == 0  # like the key file
    again = cli_in_process("keys", "vault", "init", str(keys))  # idempotent: nothing changed
    assert again.code == 0 and "already uses" in again.stdout, str(again)
    # a second key keeps the vault
    assert cli_in_process("keys", "generate", "--key-file", str(keys)).code == 0
    assert json.loads(keys.read_text())["data_keys"] == "keys.vault.db"
    db = tmp_path / "live.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    store.save("acme/u1", {"email": "u1@example.com"})
    store.close()
    common = ["--db", str(db), "--key-file", str(keys)]
    gone = cli_in_process("forget", "acme/u1", "--yes", "--json", *common)
    assert gone.code == 0 and json.loads(gone.stdout)["key_destroyed"], str(gone)
    shown = cli_in_process("show", "acme/u1", *common)
    assert shown.code != 0 and "forgotten" in one_error_line(shown)


def test_keys_vault_init_refuses_what_it_would_break(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    assert cli_in_process("keys", "generate", "--key-file", str(keys)).code == 0
    before = keys.read_text()
    foreign = tmp_path / "app.db"
    import sqlite3

    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    cases = [
        (["--vault", str(foreign)], "not one statekeeper wrote"),
        (["--vault", str(tmp_path / "no" / "v.db")], "no such folder"),
        (["--vault", str(tmp_path)], "is a folder"),
    ]
    for extra, needle in cases:
        run = cli_in_process("keys", "vault", "init", str(keys), *extra)
        assert run.code == 2 and needle in one_error_line(run), str(run)
    assert keys.read_text() == before  # nothing written
    assert cli_in_process("keys", "vault", "init", str(keys)).code == 0
    moved = cli_in_process("keys", "vault", "init", str(keys), "--vault", str(tmp_path / "v2.db"))
    assert moved.code == 2 and "orphan" in one_error_line(moved), str(moved)
    missing = cli_in_process("keys", "vault", "init", str(tmp_path / "none.json"))
    assert missing.code == 2 and "cannot read key file" in one_error_line(missing)


def test_retention_apply_then_backup_then_restore_from_the_command_line(tmp_path: Path) -> None:
    """A store that follows a retention policy backs up and restores: the compacted
    stream comes back compacted (history before its base gone) and verifies."""
    db, target = tmp_path / "s.db", tmp_path / "restored.db"
    store = SyncStateStore(f"sqlite:///{db}", snapshot_every=3)
    for i in range(10):
        store.save("acme/a", {"i": i})
        store.save("acme/hold", {"i": i})
    store.close()
    policy = tmp_path / "retention.policy"
    policy.write_text("acme keep_last=2\nhold acme/hold\n")
    done = cli_in_process("retention", "apply", "--policy", str(policy), "--db", str(db))
    assert done.code == 0, str(done)
    bk = ["--backup-key", str(tmp_path / "backup.key")]
    made = cli_in_process("backup", f"sqlite:///{db}", "--to", str(tmp_path / "b.skb"), *bk,
                          "--create-backup-key", "--json")  # fmt: skip
    assert made.code == 0, str(made)
    assert json.loads(made.stdout)["agents"] == 2
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    restored = cli_in_process("restore", str(tmp_path / "b.skb"), "--to", str(target), *bk,
                              "--json")  # fmt: skip
    assert restored.code == 0, str(restored)
    assert json.loads(restored.stdout)["agents"] == 2
    verified = cli_in_process("verify", "--db", str(target))
    assert verified.code == 0, str(verified)
    back = SyncStateStore(f"sqlite:///{target}")
    try:
        assert back.load("acme/a").data == {"i": 9}
        assert back.load("acme/hold").data == {"i": 9}
    finally:
        back.close()
    with contextlib.closing(sqlite3.connect(target)) as conn:
        rows = conn.execute("SELECT agent_id, seq FROM sk_events ORDER BY agent_id, seq").fetchall()
    assert [seq for a, seq in rows if a == "acme/a"] == [9, 10]  # history before 9: gone
    assert [seq for a, seq in rows if a == "acme/hold"] == list(range(1, 11))


def test_agents_and_stats_list_a_forgotten_agent_as_such(tmp_path: Path) -> None:
    # was: one forgotten agent made `agents` and `stats` of the whole store fail
    # ("error: agent 'acme/u1' was forgotten ...", exit 2): no listing at all after a
    # `forget` without --purge
    keys = key_file_with_vault(tmp_path)
    db = tmp_path / "live.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    for i in range(3):
        store.save(f"acme/u{i}", {"email": f"u{i}@example.com"}, fsm_state="active")
    store.close()
    common = ["--db", str(db), "--key-file", str(keys)]
    assert cli_in_process("forget", "acme/u1", "--yes", *common).code == 0
    listed = cli_in_process("agents", "--json", *common)
    assert listed.code == 0, str(listed)
    rows = {a["agent_id"]: a for a in json.loads(listed.stdout)["agents"]}
    assert rows["acme/u1"]["state"] is None and rows["acme/u1"]["forgotten"] is True
    assert rows["acme/u0"]["state"] == "active" and rows["acme/u0"]["forgotten"] is False
    table = cli_in_process("agents", *common)
    assert table.code == 0 and "(forgotten)" in table.stdout, str(table)
    stats = cli_in_process("stats", "--json", *common)
    assert stats.code == 0, str(stats)
    assert json.loads(stats.stdout)["states"] == {"active": 2, "(forgotten)": 1}


def test_an_export_of_the_whole_store_leaves_out_forgotten_agents_and_says_so(
    tmp_path: Path,
) -> None:
    # was: one forgotten agent made `export` of the whole store fail (exit 2, no file):
    # no way to move a store once anyone in it exercised the right to be forgotten
    keys = key_file_with_vault(tmp_path)
    db = tmp_path / "live.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    for i in range(3):
        store.save(f"acme/u{i}", {"email": f"u{i}@example.com"}, fsm_state="active")
        store.save(f"acme/u{i}", {"email": f"u{i}@example.org"}, fsm_state="active")
    store.close()
    common = ["--db", str(db), "--key-file", str(keys)]
    assert cli_in_process("forget", "acme/u1", "--yes", *common).code == 0
    out = tmp_path / "all.jsonl"
    done = cli_in_process("export", "-o", str(out), "--json", *common)
    assert done.code == 0, str(done)
    assert json.loads(done.stdout) == {
        "agents": 2,
        "events": 4,
        "forgotten": ["acme/u1"],
        "deleted": [],
        "file": str(out),
    }
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["end"] for line in lines if "end" in line} == {"acme/u0", "acme/u2"}
    assert "u1@example" not in out.read_text()
    said = cli_in_process("export", "-o", str(out), *common)
    assert said.code == 0 and "left out 1 forgotten agent(s)" in said.stdout, str(said)
    assert "acme/u1" in said.stdout
    # the file imports whole into a new store
    target = tmp_path / "moved.db"
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    moved = cli_in_process("import", str(out), "--db", str(target), "--key-file", str(keys))
    assert moved.code == 0, str(moved)
    # naming the forgotten agent is still an error: it cannot be exported
    named = cli_in_process("export", "acme/u1", "-o", str(tmp_path / "one.jsonl"), *common)
    assert named.code != 0 and "forgotten" in str(named)
    assert not (tmp_path / "one.jsonl").exists()


def test_a_refused_delete_is_audited_as_a_delete_before_any_question(tmp_path: Path) -> None:
    """``statekeeper --as P delete AGENT`` by a principal that may not write AGENT: one
    refusal, recorded as the ``delete`` it is, before the confirmation question. Before,
    the command read the head first, so a principal that may not read the agent was
    recorded as refused a ``head`` (the audit log never showed the attempted delete),
    and one that may read it was asked to confirm a deletion it would be refused."""
    keys = key_file_with_vault(tmp_path)
    db = tmp_path / "s.db"
    store = SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    store.save("acme/t1", {"n": 1})
    store.save("globex/g1", {"n": 1})
    store.close()
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.alice]\nread = ["acme/**"]\n')
    common = ["--db", str(db), "--key-file", str(keys)]
    as_alice = ["--as", "alice", "--policy", str(policy)]
    for agent in ("globex/g1", "acme/t1"):  # unreadable; readable but not writable
        refused = cli_in_process(*as_alice, "delete", agent, *common)  # no --yes
        assert refused.code == 4, str(refused)
        assert f"may not delete on agent '{agent}'" in one_error_line(refused)
        assert "Delete agent" not in refused.stdout + refused.stderr  # never asked
    relative = cli_in_process("--namespace", "acme", *as_alice, "delete", "t1", *common)
    assert relative.code == 4 and "'t1'" in one_error_line(relative), str(relative)

    async def denied() -> list[tuple[str | None, str, str | None]]:
        async with StateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as s:
            log = AuditLog(s.backend, Keyring.from_file(keys))
            return [
                (e.principal, e.operation, e.agent_id)
                async for e in log.entries()
                if e.outcome == "denied"
            ]

    assert asyncio.run(denied()) == [
        ("alice", "delete", "globex/g1"),
        ("alice", "delete", "acme/t1"),
        ("alice", "delete", "acme/t1"),
    ]
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as after:
        assert after.head("acme/t1") == 1  # nothing deleted
