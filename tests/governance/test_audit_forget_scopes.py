"""A governed store's ``forget`` entry (written before any key goes) names the key
families whose keys it destroys: an auditor can tell which stores' copies were
shredded. It named only ``{"purge": false}`` — ``key_scopes`` was in the entry of an
ungoverned store's ``forget`` (given ``audit=``), written after, but not in the entry a
store opened as a principal writes first. The families are store ids (no key
material). ``audit verify`` checks each named family holds a tombstone: it took any
tombstone of the agent id for a sign the forget was applied, so one left by another
store's ``forget`` of the same id hid a forget a crash stopped before its key went."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.security import Keyring

MASTER = bytes(range(32))
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


def _governed(url: str, keys: Keyring) -> StateStore:
    return StateStore(
        url, keyring=keys, principal="ops", policy=POLICY, audit=Audit(), witness=False
    )


async def test_the_entry_written_first_names_the_families_shredded(tmp_path: Path) -> None:
    keys = Keyring({"k1": MASTER}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a:
        await a.save("acme/u1", {"ssn": "078-05-1120"})
        await backup(a, tmp_path / "a.skb", bkey)
        source = await a.backend.feed_id()
    async with _governed(b_url, keys) as b:
        await restore(b, [tmp_path / "a.skb"], bkey)
        await b.save("acme/u1", {"ssn": "078-05-1120", "n": 2})
        result = await forget(b, "acme/u1")
        target = await b.backend.feed_id()
        log = AuditLog(b.backend, keys)
        (entry,) = [e async for e in log.entries() if e.operation == "forget"]
        # the source's copy and the target's: both named, before either went
        assert sorted(entry.detail["key_scopes"]) == sorted([str(source), str(target)]), (
            entry.detail
        )
        assert sorted(result.scopes) == sorted(entry.detail["key_scopes"])
        assert "ahead" in entry.detail  # (the entry written first)
        report = await log.verify()
        assert report.ok and not report.unapplied, report


class _Stopped(BaseException):
    """The process stopping between the entry and the key (not an error: no void)."""


class _StopsAtDestroy(SqliteKeyVault):
    stop = False

    def destroy_in(self, family: str, agent_id: str, at: float) -> bool:
        if self.stop:
            raise _Stopped
        return super().destroy_in(family, agent_id, at)


async def test_verify_is_not_fooled_by_another_stores_tombstone_of_the_id(
    tmp_path: Path,
) -> None:
    vault = _StopsAtDestroy(tmp_path / "vault.db")
    keys = Keyring({"k1": MASTER}, data_keys=vault)
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a, _governed(b_url, keys) as b:
        await a.save("acme/u1", {"person": "alice"})
        await b.save("acme/u1", {"person": "bob"})  # another person, same id
        await forget(a, "acme/u1")  # A's tombstone of the id
        vault.stop = True
        with pytest.raises(_Stopped):
            await forget(b, "acme/u1")  # entry written, key not destroyed
        vault.stop = False
        assert (await b.load("acme/u1")).data == {"person": "bob"}  # not forgotten
        report = await AuditLog(b.backend, keys).verify()
        # was: no unapplied entry (A's tombstone taken for B's)
        (line,) = report.unapplied
        assert "the forget of 'acme/u1' it records was not applied" in line, line
        assert (await forget(b, "acme/u1")).destroyed  # run again: finished
        report = await AuditLog(b.backend, keys).verify()
        assert not report.unapplied, report


async def test_a_forget_that_shreds_a_predecessors_copy_is_not_reported_unapplied(
    tmp_path: Path,
) -> None:
    # a new stream continuing another (LangGraph's pruning: keyring.link) whose
    # predecessor is a restored copy: the forget destroys the source's key of the
    # predecessor, and its tombstone is the predecessor's, not the agent's
    keys = Keyring({"k1": MASTER}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=keys) as a:
        await a.save("acme/g1", {"ssn": "078-05-1120"})
        await backup(a, tmp_path / "a.skb", bkey)
        source = await a.backend.feed_id()
    async with _governed(b_url, keys) as b:
        await restore(b, [tmp_path / "a.skb"], bkey)
        await b.save("acme/g2", {"ssn": "078-05-1120", "n": 2})
        assert keys.link("acme/g2", "acme/g1")
        result = await forget(b, "acme/g2")
        assert source in result.scopes
        log = AuditLog(b.backend, keys)
        report = await log.verify()
        assert report.ok and not report.unapplied, report  # was: "was not applied"
