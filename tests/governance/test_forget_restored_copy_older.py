"""A copy restored by a version before the key adoption
(:func:`statekeeper.governance.backup.restoretarget.adopt_copied_keys`): the target's key
family holds no key of the agents it copied, their records are sealed with the source's
keys alone. After the source's ``forget``, the tombstone is the source's family's only,
which the copy's family does not continue: ``Keyring.forgotten_in`` of the copy said
"not forgotten", and an export of the copy taken before the forget was imported into
another store, the forgotten agent readable there (``import`` checks the tombstones of
the family the file names: the copy's). A store that holds the agent (``held``) with no
key of its own lineage for it, every key of it elsewhere destroyed, now counts it as
forgotten."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentNotFound
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.store.keyguard import key_family

from ._restore_stopped import older_restore
from .test_forget_restored_copy import SECRET, _key_file, _two_turns


async def test_an_export_of_an_older_restored_copy_does_not_bring_a_forgotten_agent_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.cli.transfer import export_agents, import_agents

    key_file = _key_file(tmp_path)
    keys = Keyring.from_file(key_file)
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    d_url = f"sqlite:///{tmp_path / 'd.db'}"
    async with StateStore(a_url, keyring=keys) as a:
        for agent in ("u1", "u2"):
            await _two_turns(a, agent)
        await backup(a, tmp_path / "a.skb", bkey)
    async with StateStore(b_url, keyring=keys) as b:
        with older_restore(monkeypatch):  # a restore made before the key adoption
            assert (await restore(b, [tmp_path / "a.skb"], bkey)).agents == 2
        exported = io.BytesIO()
        await export_agents(b, None, exported)
        family = await key_family(b.backend, b.codec)
    assert SECRET.encode() in exported.getvalue()  # (an export is decrypted)
    async with StateStore(a_url, keyring=keys) as a:
        assert (await forget(a, "u1")).destroyed
    assert keys.forgotten_in(family, "u1", held=True) is not None  # was: None
    assert keys.forgotten_in(family, "u2", held=True) is None
    async with StateStore(d_url, keyring=keys) as d:
        await d.save("other", {"n": 1})  # (import refuses to create a store)
    forgotten: list[str] = []
    exported.seek(0)
    agents, _, _ = await import_agents(d_url, exported, key_file=key_file, forgotten=forgotten)
    assert (agents, forgotten) == (1, ["u1"])  # was: (2, []), u1 readable in D
    async with StateStore(d_url, keyring=keys) as d:
        with pytest.raises(AgentNotFound):
            await d.load("u1")
        assert (await d.load("u2")).data == {"ssn": SECRET, "n": 1}


async def test_a_store_holding_no_copy_is_not_told_another_stores_forget(
    tmp_path: Path,
) -> None:
    # without ``held`` (the store may hold nothing of the agent), and with a key of the
    # agent live elsewhere, another store's tombstone says nothing about this store
    keys = Keyring.from_file(_key_file(tmp_path))
    a_url, c_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    e_url = f"sqlite:///{tmp_path / 'e.db'}"
    async with StateStore(a_url, keyring=keys) as a, StateStore(c_url, keyring=keys) as c:
        await _two_turns(a, "u1")
        await _two_turns(c, "u1")  # C's own u1, another person
        await forget(a, "u1")
        c_family = await key_family(c.backend, c.codec)
    async with StateStore(e_url, keyring=keys) as e:
        await e.save("x", {})
        e_family = await key_family(e.backend, e.codec)
    assert keys.forgotten_in(e_family, "u1") is None
    assert keys.forgotten_in(c_family, "u1", held=True) is None
    assert keys.forgotten_in(e_family, "u1", held=True) is None  # C's key is live
