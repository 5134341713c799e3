"""Restores :func:`statekeeper.codec.keyscope.adopt` missed: the target wrote the copy on
under a key of its own, and the source's ``forget`` left the copy's newest snapshot
(the whole state) readable.

A restore stopped after its writes and run again (``skip_existing=True``): the
adoption (:func:`statekeeper.governance.backup.restoretarget.adopt_copied_keys`) ran
over the agents the run wrote; a rerun of a restore killed between its writes and
the adoption finds every agent held, writes none, and adopted none: the target wrote
the copies on under keys of its own family, and the source's ``forget`` left the
copy's newest snapshot readable.

A target that held an agent of the same id before (deleted, its key kept for the
records it sealed): the adoption left the agent alone, and the target wrote the copy
on with its old key."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import AgentForgotten
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget

from .test_forget_restored_copy import SECRET, _two_turns, _written_on

restore_module = importlib.import_module("statekeeper.governance.backup.restore")


class _Killed(Exception):
    """Stands for the process killed between the restore's writes and the adoption."""


async def test_a_rerun_of_a_restore_stopped_before_the_adoption_adopts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keyring({"k1": generate_key()}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a:
        for agent in ("u1", "u2"):
            await _two_turns(a, agent)
        await backup(a, tmp_path / "a.skb", bkey)

    async def killed(*_: object) -> int:
        raise _Killed

    async with StateStore(b_url, keyring=keys) as b:
        with monkeypatch.context() as patched:
            patched.setattr(restore_module, "adopt_copied_keys", killed)
            with pytest.raises(_Killed):
                await restore(b, [tmp_path / "a.skb"], bkey)
    async with StateStore(b_url, keyring=keys) as b:
        rerun = await restore(b, [tmp_path / "a.skb"], bkey, skip_existing=True)
        assert rerun.skipped == 2
        for agent in ("u1", "u2"):
            await _written_on(b, agent)
            assert (await b.load(agent)).data == {"ssn": SECRET, "n": 2}
    async with StateStore(a_url, keyring=keys) as a:
        await forget(a, "u1")
    async with StateStore(b_url, keyring=keys) as b:
        with pytest.raises(AgentForgotten):  # was: {'ssn': ..., 'n': 2}
            await b.load("u1")
        assert (await b.load("u2")).data == {"ssn": SECRET, "n": 2}


async def test_a_target_that_had_its_own_key_of_the_id_writes_the_copy_with_the_copys(
    tmp_path: Path,
) -> None:
    keys = Keyring({"k1": generate_key()}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a, StateStore(b_url, keyring=keys) as b:
        await _two_turns(a, "u1")
        await backup(a, tmp_path / "a.skb", bkey)
        await b.save("u1", {"other": "person"})  # B's own u1, another person
        await backup(b, tmp_path / "b-old.skb", bkey)
        await b.delete("u1")
        assert (await restore(b, [tmp_path / "a.skb"], bkey)).agents == 1
        await _written_on(b, "u1")
        assert (await b.load("u1")).data == {"ssn": SECRET, "n": 2}
        await forget(a, "u1")
    async with StateStore(b_url, keyring=keys) as b:
        with pytest.raises(AgentForgotten):  # was: {'ssn': ..., 'n': 2}
            await b.load("u1")
        with pytest.raises(AgentForgotten):
            await b.save("u1", {"ssn": SECRET})
    # B's own u1 of before was not forgotten: its backup still restores, readable
    async with StateStore(f"sqlite:///{tmp_path / 'c.db'}", keyring=keys) as c:
        assert (await restore(c, [tmp_path / "b-old.skb"], bkey)).agents == 1
        assert (await c.load("u1")).data == {"other": "person"}
