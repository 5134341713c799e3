"""A store's key family (its store id, :mod:`statekeeper.codec.keyscope`) is read on the
store's first use, by its first-use gate. A tool whose first act on a freshly opened
store reads past that gate and seals records — a retention compaction's base snapshot,
a schema migration's rewritten head — sealed them with a data key made with no family:
the agent's *legacy* key, keyed by its id alone, shared by every store of the key vault.
A ``forget`` of the same id in another, unrelated store of the vault then destroyed it
(it destroys the legacy key: any store may have used it), and the first store's agent —
never asked to be forgotten — became unreadable (``AgentForgotten``) for good. One
``Codec`` given to two stores did the same (it held the first store's family). And a
restored copy of a store, whose records are sealed with the source's keys, could no
longer be rekeyed once the source forgot one of them (the tombstone is the source's)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten, ConfigurationError
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy, Rule
from statekeeper.governance.shredding import forget
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from statekeeper.security import rekey

from ..schema.apps import SupportV1, support_v1, support_v2

KEY = bytes(range(32))


def _keys(tmp_path: Path) -> Keyring:
    return Keyring({"k1": KEY}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))


def _legacy_keys(tmp_path: Path) -> list[str]:
    with closing(sqlite3.connect(tmp_path / "vault.db")) as db:
        return [str(r[0]) for r in db.execute("SELECT agent_id FROM data_keys")]


async def _forget_in_another_store(tmp_path: Path, agent_id: str) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'other.db'}", keyring=_keys(tmp_path)) as b:
        await b.save(agent_id, {"someone": "else"})
        await forget(b, agent_id)


async def test_a_compaction_as_a_stores_first_use_seals_with_the_stores_own_key(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url, keyring=_keys(tmp_path)) as a:
        for i in range(10):
            await a.save("user-1", {"i": i})
    async with StateStore(url, keyring=_keys(tmp_path), cache_size=0) as a:
        report = await apply_retention(a, RetentionPolicy(rules=(Rule("*", keep_last=3),)))
        assert [(x.kind, x.outcome) for x in report.actions] == [("compact", "done")]
    assert _legacy_keys(tmp_path) == []  # no key of the id alone was made
    await _forget_in_another_store(tmp_path, "user-1")
    async with StateStore(url, keyring=_keys(tmp_path), cache_size=0) as a:
        assert (await a.load("user-1")).data == {"i": 9}
        assert (await a.verify()).ok


async def test_a_migration_as_a_stores_first_use_seals_with_the_stores_own_key(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url, keyring=_keys(tmp_path)) as a:
        await TypedStates(a, support_v1).create("a0", SupportV1(customer_name="C0"))
    async with StateStore(url, keyring=_keys(tmp_path), cache_size=0) as a:
        report = await migrate(a, support_v2, method="rewrite")
        assert (report.changed, report.failed) == (1, [])
    assert _legacy_keys(tmp_path) == []
    await _forget_in_another_store(tmp_path, "a0")
    async with StateStore(url, keyring=_keys(tmp_path), cache_size=0) as a:
        assert (await TypedStates(a, support_v2).load("a0")).customer == "C0"


async def test_a_stores_codec_seals_no_data_key_before_its_key_family_is_known(
    tmp_path: Path,
) -> None:
    # (any other tool that would: refused, where it made a key every store shares)
    codec = Codec(keyring=_keys(tmp_path))
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}", codec=codec):
        with pytest.raises(ConfigurationError, match="key family"):
            codec.seal("user-1", 1, "e", 0.0, b"{}", bytes(32))
    assert _legacy_keys(tmp_path) == []
    # a codec of no store still seals with the legacy key of the id
    alone = Codec(keyring=_keys(tmp_path))
    alone.seal("user-2", 1, "e", 0.0, b"{}", bytes(32))
    assert _legacy_keys(tmp_path) == ["user-2"]


async def test_one_codec_given_to_two_stores_seals_each_with_its_own_keys(
    tmp_path: Path,
) -> None:
    # the codec held the first store's key family: the second store's agents were sealed
    # with the first store's keys, and a forget in the first shredded them
    codec = Codec(keyring=_keys(tmp_path))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, codec=codec) as a, StateStore(b_url, codec=codec) as b:
        await a.save("user-1", {"email": "alice@a"})
        await b.save("user-1", {"email": "bob@b"})
        await forget(a, "user-1")
    async with StateStore(b_url, keyring=_keys(tmp_path), cache_size=0) as b:
        assert (await b.load("user-1")).data == {"email": "bob@b"}
        await b.save("user-1", {"email": "bob@b", "n": 2})
    async with StateStore(a_url, codec=codec, cache_size=0) as a:  # (reopened with it)
        with pytest.raises(AgentForgotten):
            await a.load("user-1")


async def test_rekey_of_a_restored_copy_passes_over_an_agent_its_source_forgot(
    tmp_path: Path,
) -> None:
    # the copy's records of user-1 are sealed with the source's key, which the source's
    # forget destroyed: the tombstone is the source's family's, so rekey of the copy did
    # not see user-1 as forgotten and failed whole with AgentForgotten (no rotation of
    # the copy's master key possible, ever)
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, c_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    async with StateStore(a_url, keyring=_keys(tmp_path)) as a:
        await a.save("user-1", {"email": "alice@a"})
        await a.save("user-2", {"email": "dave@a"})
        await backup(a, file, bkey)
    async with StateStore(c_url, keyring=_keys(tmp_path)) as c:
        assert (await restore(c, [file], bkey)).agents == 2
    async with StateStore(a_url, keyring=_keys(tmp_path)) as a:
        await forget(a, "user-1")
    rotated = Keyring(
        {"k1": KEY, "k2": bytes(range(1, 33))},
        active="k2",
        data_keys=SqliteKeyVault(tmp_path / "vault.db"),
    )
    async with StateStore(c_url, keyring=rotated, cache_size=0) as c:
        stats = await rekey(c)
        assert (stats.agents, stats.forgotten) == (1, 1)
        assert (await c.load("user-2")).data == {"email": "dave@a"}
        with pytest.raises(AgentForgotten):
            await c.load("user-1")
        assert (await c.verify()).ok
