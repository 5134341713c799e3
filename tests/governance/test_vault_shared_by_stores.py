"""One key vault (one key file, one ``$STATEKEEPER_KEY_FILE``) shared by two unrelated
stores: ``forget user-1`` on one of them shredded ``user-1`` in the other too — the
vault keyed a data key by agent id alone, so the other store's user (never asked to be
forgotten) raised ``AgentForgotten`` from then on, exit 0 everywhere. It was documented
("give each store its own vault"); sharing one key file across services is what a key
file in an environment variable invites.

Data keys are now keyed by (key family, agent id), a store's family being its store id
(:mod:`statekeeper.codec.keyscope`): each store gets its own keys, while a copy of a
store (a backup restored anywhere) opens with, and is shredded with, the keys of the
store it was copied from. A vault written before families keeps working
(``tests/data/shared-vault-by-main.*.sql``: two stores and their vault, written by
main's code)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.codec.datakeys import KeyVault, MemoryKeyVault, SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import AgentForgotten
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.security import rekey
from tests.keyfiles import write_key_file

from ..backends._services import fresh_url
from ..cli._subprocess import cli_env, cli_in_process

ENGINES = ["memory", "sqlite", "postgresql", "redis"]
KEY = bytes(range(32))
DATA = Path(__file__).parents[1] / "data"


def _vault(kind: str, tmp_path: Path) -> KeyVault:
    return MemoryKeyVault() if kind == "memory" else SqliteKeyVault(tmp_path / "vault.db")


@contextmanager
def _two_urls(engine: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    (tmp_path / "billing").mkdir()
    (tmp_path / "support").mkdir()
    with (
        fresh_url(engine, tmp_path / "billing") as billing,
        fresh_url(engine, tmp_path / "support") as support,
    ):
        yield billing, support


@pytest.mark.parametrize("vault_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_forget_in_one_store_leaves_the_same_id_in_another_store_of_the_vault(
    tmp_path: Path, engine: str, vault_kind: str
) -> None:
    keys = Keyring({"k1": KEY}, data_keys=_vault(vault_kind, tmp_path))
    with _two_urls(engine, tmp_path) as (billing_url, support_url):
        async with (
            StateStore(billing_url, keyring=keys) as billing,
            StateStore(support_url, keyring=keys) as support,
        ):
            await billing.save("user-1", {"email": "alice@billing"})
            await support.save("user-1", {"email": "bob@support"})
            result = await forget(billing, "user-1")
            assert result.destroyed
            # the audit of it names the store's key family: billing's store id
            assert result.scopes == (await billing.backend.feed_id(),)
            with pytest.raises(AgentForgotten):
                await billing.load("user-1")
            with pytest.raises(AgentForgotten):  # the id stays refused where it was forgotten
                await billing.save("user-1", {"email": "again@billing"})
            # the other store's user-1 is another person: untouched, still writable
            assert (await support.load("user-1")).data == {"email": "bob@support"}
            await support.save("user-1", {"email": "bob@support", "n": 2})
            assert (await support.verify()).ok
            if engine == "memory":  # a memory store ends with its object
                return
        # another process, a keyring of its own over the same vault file
        if vault_kind == "sqlite":
            again = Keyring({"k1": KEY}, data_keys=tmp_path / "vault.db")
            async with StateStore(support_url, keyring=again) as support:
                assert (await support.load("user-1")).data == {"email": "bob@support", "n": 2}
            async with StateStore(billing_url, keyring=again) as billing:
                with pytest.raises(AgentForgotten):
                    await billing.load("user-1")


def test_the_command_line_with_one_key_file_in_the_environment(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "v.db"})
    for name in ("billing", "support"):
        with SyncStateStore(
            f"sqlite:///{tmp_path / name}.db", keyring=Keyring.from_file(keys)
        ) as store:
            store.save("user-1", {"email": f"user-1@{name}"})
    env = {**cli_env(), "STATEKEEPER_KEY_FILE": str(keys)}
    gone = cli_in_process(
        "forget", "user-1", "--yes", "--json", "--db", f"{tmp_path}/billing.db", env=env
    )
    assert gone.code == 0, str(gone)
    shown = cli_in_process("show", "user-1", "--json", "--db", f"{tmp_path}/support.db", env=env)
    assert shown.code == 0, str(shown)  # was: "agent 'user-1' was forgotten", exit 2
    assert "user-1@support" in shown.stdout
    out = json.loads(gone.stdout)
    assert out["key_destroyed"] and len(out["key_scopes"]) == 1
    refused = cli_in_process("show", "user-1", "--db", f"{tmp_path}/billing.db", env=env)
    assert refused.code != 0 and "forgotten" in refused.stderr


async def test_a_restore_is_shredded_with_the_store_it_was_copied_from(tmp_path: Path) -> None:
    keys = Keyring({"k1": KEY}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, c_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    async with StateStore(a_url, keyring=keys) as a, StateStore(c_url, keyring=keys) as c:
        await a.save("user-1", {"email": "alice@a"})
        await a.save("user-2", {"email": "dave@a"})
        await c.save("user-3", {"email": "erin@c"})  # the target has a family of its own
        await c.save("user-9", {"email": "zoe@c"})
        c_before = await c.backend.feed_id()
        await backup(a, file, bkey)
        # a restore into a store with agents of its own: the restored agents keep the
        # keys of the store they were copied from, the target's own keep the target's
        assert (await restore(c, [file], bkey)).agents == 2
        assert (await c.load("user-1")).data == {"email": "alice@a"}
        await c.save("user-3", {"email": "erin@c", "n": 2})  # its own agents: as before
        await forget(a, "user-1")  # the source forgets: the restored copy goes with it
    # (each store reopened: a store's cache keeps what it read before another's forget)
    async with StateStore(a_url, keyring=keys) as a, StateStore(c_url, keyring=keys) as c:
        with pytest.raises(AgentForgotten):
            await c.load("user-1")
        await forget(c, "user-2")  # the copy forgets: the source's goes with it
    async with StateStore(a_url, keyring=keys) as a, StateStore(c_url, keyring=keys) as c:
        with pytest.raises(AgentForgotten):
            await a.load("user-2")
        # the target's id was renewed by the restore: its forget still destroys the keys
        # it made before (a backup of it taken before the restore needs them)
        assert c_before != await c.backend.feed_id()
        result = await forget(c, "user-3")
        assert result.destroyed and c_before in result.scopes
        with pytest.raises(AgentForgotten):  # and its new writes are refused too
            await c.save("user-3", {"email": "back@c"})
        assert (await c.load("user-9")).data == {"email": "zoe@c"}
        assert (await c.verify()).forgotten == ["user-1", "user-2", "user-3"]


def _from_sql(path: Path, sql: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(sql.read_text(encoding="utf-8"))


async def test_a_vault_and_stores_written_before_key_families_keep_working(
    tmp_path: Path,
) -> None:
    # written by main's code with one vault: billing and support each saved "user-1"
    # (one data key for both, keyed by the id alone), and billing forgot "gone"
    for name in ("billing", "support", "vault"):
        _from_sql(tmp_path / f"{name}.db", DATA / f"shared-vault-by-main.{name}.sql")
    keys = Keyring({"k1": KEY}, data_keys=tmp_path / "vault.db")
    billing_url = f"sqlite:///{tmp_path / 'billing.db'}"
    support_url = f"sqlite:///{tmp_path / 'support.db'}"
    async with (
        StateStore(billing_url, keyring=keys) as billing,
        StateStore(support_url, keyring=keys) as support,
    ):
        # every record written before still opens
        assert (await billing.load("user-1")).data == {"email": "alice@billing"}
        assert (await support.load("user-1")).data == {"email": "bob@support"}
        # a forget made before key families holds in every store of the vault
        for store in (billing, support):
            with pytest.raises(AgentForgotten):
                await store.save("gone", {"email": "back"})
        await billing.save("user-1", {"email": "alice@billing", "n": 2})  # its own key now
        # rekey moves a store's records off the legacy key (shared by the stores)
        await rekey(support)
        result = await forget(billing, "user-1")
        # the legacy key is destroyed with billing's own: billing may have used it
        assert result.scopes == ("legacy", await billing.backend.feed_id())
        with pytest.raises(AgentForgotten):
            await billing.load("user-1")
        assert (await support.load("user-1")).data == {"email": "bob@support"}
        await support.save("user-1", {"email": "bob@support", "n": 2})
        assert (await support.verify()).ok


def test_a_read_finds_an_agents_keys_in_the_vault_without_scanning_it(tmp_path: Path) -> None:
    # (keyed by family first, every read of a key scanned every store's keys: +7 us a
    # cold load at 300 agents, growing with the vault)
    vault = SqliteKeyVault(tmp_path / "vault.db")
    for family in ("f1", "f2"):
        vault.create_in(family, "user-1", "k1", b"w" * 60)
    statements: list[str] = []
    vault._db.set_trace_callback(statements.append)
    assert [e.family for e in vault.entries("user-1")] == ["f1", "f2"]
    vault._db.set_trace_callback(None)
    with closing(sqlite3.connect(tmp_path / "vault.db")) as db:
        plan = [str(row) for s in statements for row in db.execute("EXPLAIN QUERY PLAN " + s)]
    assert plan and not [p for p in plan if "SCAN" in p], plan
