"""An agent whose records were sealed before the store had a key vault (under the master
key alone) is not a forgotten one because another store of the vault forgot an agent
of the same id.

``Keyring.forgotten_in(held=True)`` counts an agent the store holds, with no key of its
own lineage, as forgotten once every key of it in the vault is destroyed (a copy
restored before copies adopted their keys, sealed with the source's key). A store
whose records of the agent use no data key at all (written before ``"data_keys"`` was
added to the key file) has no key of it in the vault either: another store's
``forget`` of its own ``u1`` made ``keys status`` count this store's ``u1`` as
"(forgotten)" (its old key listed as unused) and ``rekey`` pass it over — the operator
retired the old key and ``u1``, never forgotten, no longer opened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.security import rekey
from statekeeper.security.keyusage import FORGOTTEN, key_usage

from ..governance._restore_stopped import older_restore

K1, K2 = bytes(range(32)), bytes(range(1, 33))


async def test_another_stores_forget_does_not_make_master_key_records_forgotten(
    tmp_path: Path,
) -> None:
    a_url, c_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    async with StateStore(a_url, keyring=Keyring({"k1": K1}, active="k1")) as a:
        await a.save("u1", {"n": 1})  # before the vault: under the master key alone
    vault = SqliteKeyVault(tmp_path / "vault.db")
    async with StateStore(c_url, keyring=Keyring({"k1": K1}, active="k1", data_keys=vault)) as c:
        await c.save("u1", {"someone": "else"})  # C's own u1
        assert (await forget(c, "u1")).destroyed
    rotated = Keyring({"k1": K1, "k2": K2}, active="k2", data_keys=vault)
    async with StateStore(a_url, keyring=rotated) as a:
        assert (await a.load("u1")).data == {"n": 1}
        usage = await key_usage(a)
        assert FORGOTTEN not in usage  # was: {"(forgotten)": 2}, k1 "unused"
        assert usage.get("k1", 0) > 0
        stats = await rekey(a)
        assert (stats.agents, stats.forgotten) == (1, 0)  # was: (0, 1), left under k1
    retired = Keyring({"k2": K2}, active="k2", data_keys=vault)
    async with StateStore(a_url, keyring=retired) as a:
        assert (await a.load("u1")).data == {"n": 1}  # was: KeyNotFound (k1 retired)


async def test_an_older_restored_copy_of_a_forgotten_agent_still_counts_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (what ``held`` is for, kept: the copy's records are sealed with the source's data
    # key, every key of it destroyed; rekey and keys status count it forgotten)
    vault = SqliteKeyVault(tmp_path / "vault.db")
    keys = Keyring({"k1": K1}, active="k1", data_keys=vault)
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a:
        await a.save("u1", {"n": 1})
        await backup(a, tmp_path / "a.skb", bkey)
    async with StateStore(b_url, keyring=keys) as b:
        with older_restore(monkeypatch):  # a restore made before the key adoption
            assert (await restore(b, [tmp_path / "a.skb"], bkey)).agents == 1
    async with StateStore(a_url, keyring=keys) as a:
        assert (await forget(a, "u1")).destroyed
    rotated = Keyring({"k1": K1, "k2": K2}, active="k2", data_keys=vault)
    async with StateStore(b_url, keyring=rotated) as b:
        assert set(await key_usage(b)) == {FORGOTTEN}
        stats = await rekey(b)
        assert (stats.agents, stats.forgotten) == (0, 1)
