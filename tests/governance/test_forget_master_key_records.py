"""forget of an agent whose records are not under a data key of its own.

An agent written before the store's key vault was set up has records encrypted with the
master key alone. Destroying "its data key" cannot make those unreadable: forget
reported success ("had no data key (already forgotten)", exit 0) and left a tombstone,
while every record still opened. It is now refused, nothing done, naming the remedy;
``rekey`` re-seals such records under the agent's data key, after which forget works.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.codec.pipeline import Codec
from statekeeper.errors import AgentForgotten, ConfigurationError
from statekeeper.governance.shredding import forget
from statekeeper.security.rekey import rekey

MASTER = bytes(range(32))


def _plain_ring() -> Keyring:
    return Keyring({"k1": MASTER})


def _vault_ring(tmp_path: Path) -> Keyring:
    return Keyring({"k1": MASTER}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))


async def _write_before_the_vault(url: str) -> None:
    async with StateStore(url, keyring=_plain_ring(), snapshot_every=2) as store:
        for i in range(3):
            await store.save("old", {"email": "old@example.com", "i": i})


@pytest.mark.parametrize("purge", [False, True])
async def test_forget_of_records_under_the_master_key_is_refused_and_changes_nothing(
    tmp_path: Path, purge: bool
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _write_before_the_vault(url)
    keys = _vault_ring(tmp_path)
    async with StateStore(url, keyring=keys) as store:
        with pytest.raises(ConfigurationError, match=r"'old'.*4 of its stored records.*rekey"):
            await forget(store, "old", purge=purge)
        assert keys.scoped is not None and not keys.scoped.entries("old")  # no tombstone
        assert (await store.load("old")).data["i"] == 2  # not deleted either
        await store.save("old", {"i": 3})  # and still writable


async def test_forget_of_an_agent_with_records_of_both_kinds_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _write_before_the_vault(url)
    async with StateStore(url, keyring=_vault_ring(tmp_path)) as store:
        await store.save("old", {"i": 3})  # a data key now, for the new record only
        with pytest.raises(ConfigurationError, match="4 of its stored records"):
            await forget(store, "old")
        assert (await store.load("old", at_seq=3)).data["i"] == 2


async def test_after_rekey_the_agent_is_forgotten_in_every_record(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _write_before_the_vault(url)
    async with StateStore(url, keyring=_vault_ring(tmp_path)) as store:
        stats = await rekey(store)
        assert (stats.events, stats.snapshots) == (3, 1)
        raws = [*(await store.backend.read("old")), await store.backend.latest_snapshot("old")]
        assert all(Codec.header(r.payload).data_key for r in raws if r is not None)  # type: ignore[union-attr]
        assert (await store.verify()).ok
        result = await forget(store, "old")
        assert result.destroyed
        with pytest.raises(AgentForgotten):
            await store.load("old")
        with pytest.raises(AgentForgotten):
            await store.load("old", at_seq=2)
    async with StateStore(url, keyring=_vault_ring(tmp_path)) as store:
        with pytest.raises(AgentForgotten):
            await store.load("old")


async def test_a_key_rotation_passes_over_a_forgotten_agent(tmp_path: Path) -> None:
    # rekey failed whole with AgentForgotten at the first forgotten agent: a store that
    # had forgotten one (without --purge) could never rotate its master key again
    url = f"sqlite:///{tmp_path / 's.db'}"
    vault = SqliteKeyVault(tmp_path / "vault.db")
    async with StateStore(url, keyring=Keyring({"k1": MASTER}, data_keys=vault)) as store:
        for agent_id in ("a", "b", "c"):
            await store.save(agent_id, {"v": agent_id})
        await forget(store, "b")
    both = Keyring({"k2": bytes(range(1, 33)), "k1": MASTER}, active="k2", data_keys=vault)
    async with StateStore(url, keyring=both) as store:
        stats = await rekey(store)
        assert (stats.agents, stats.forgotten) == (2, 1)
    async with StateStore(url, keyring=both.without("k1")) as store:
        assert [(await store.load(a)).data for a in ("a", "c")] == [{"v": "a"}, {"v": "c"}]
        with pytest.raises(AgentForgotten):
            await store.load("b")
        report = await store.verify()
        assert report.forgotten == ["b"] and report.ok, report.problems
