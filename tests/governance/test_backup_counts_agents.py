"""``backup`` and ``restore`` count the user's agents: their copied agents, events and
snapshots leave out the store's own streams (the audit log, the legal holds), which are
named apart, in words. Before, ``statekeeper backup`` printed "backup of 2 agent(s) (4
copied, 7 event(s)...)" for two agents of one event each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM, HOLDS_STREAM
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.holds import add_hold

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
KEYS = Keyring({"k1": bytes(range(32))})


async def _made(url: str, keys: Keyring = KEYS) -> None:
    async with StateStore(
        url, keyring=keys, principal="ops", policy=POLICY, audit=Audit()
    ) as store:  # fmt: skip
        await store.save("acme/alice", {"n": 1})
        await store.save("acme/bob", {"n": 1})
        await store.save("acme/bob", {"n": 2})
        await add_hold(store, "acme/alice", "a matter")


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql"])
async def test_a_backup_and_its_restore_count_agents_only(engine: str, tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    with fresh_url(engine, tmp_path) as url:
        if engine == "memory":  # one store object: memory:// is private to it
            async with StateStore(url, keyring=KEYS) as store:
                ops = StateStore(
                    store.backend, keyring=KEYS, principal="ops", policy=POLICY, audit=Audit()
                )
                await ops.save("acme/alice", {"n": 1})
                await ops.save("acme/bob", {"n": 1})
                await ops.save("acme/bob", {"n": 2})
                await add_hold(ops, "acme/alice", "a matter")
                made = await backup(store, file, key)
        else:
            await _made(url)
            async with StateStore(url, keyring=KEYS) as store:
                made = await backup(store, file, key)
    assert (made.agents, made.copied, made.events) == (2, 2, 3), made  # main: 4 copied
    assert made.internal_streams == tuple(sorted((AUDIT_STREAM, HOLDS_STREAM)))
    async with StateStore(f"sqlite:///{tmp_path / 'target.db'}", keyring=KEYS) as target:
        done = await restore(target, [file], key)
    assert (done.agents, done.events) == (2, 3), done  # main: the log's entries counted
    assert done.internal_streams == sorted((AUDIT_STREAM, HOLDS_STREAM))


def test_the_backup_and_restore_commands_name_the_store_s_own_streams(tmp_path: Path) -> None:
    import asyncio

    keys = tmp_path / "keys.json"
    Keyring.write_file(keys, {"k1": generate_key()}, "k1")
    db = tmp_path / "s.db"
    asyncio.run(_made(f"sqlite:///{db}", Keyring.from_file(keys)))
    bk = ["--backup-key", str(tmp_path / "b.key")]
    common = ["--key-file", str(keys)]
    made = cli_in_process(
        "backup", "--db", str(db), "--to", str(tmp_path / "b.skb"), *bk, "--create-backup-key",
        *common,
    )  # fmt: skip
    assert made.code == 0, str(made)
    text = " ".join(made.stdout.split())
    assert "backup of 2 agent(s) (2 copied, 3 event(s), 0 snapshot(s))" in text, text
    assert "with the store's audit log and legal holds" in text
    assert "\\x01" not in text and "sk-" not in text
    as_json = cli_in_process(
        "backup", "--db", str(db), "--to", str(tmp_path / "c.skb"), *bk, *common, "--json"
    )
    summary = json.loads(as_json.stdout)
    assert (summary["agents_copied"], summary["events"]) == (2, 3)
    assert summary["internal_stream_names"] == ["audit log", "legal holds"]
    target = tmp_path / "t.db"
    assert cli_in_process("init", f"sqlite:///{target}", *common).code == 0
    done = cli_in_process("restore", str(tmp_path / "b.skb"), *bk, "--db", str(target), *common)
    assert done.code == 0, str(done)
    text = " ".join(done.stdout.split())
    assert "restored and verified 2 agent(s), 3 event(s), 0 snapshot(s)" in text, text
    assert "with the store's audit log and legal holds" in text
