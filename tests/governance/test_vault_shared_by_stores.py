"""A key vault is one namespace of agent ids, whatever store asks: two stores opened
with one key file (one vault) give an agent id the same data key, so ``forget`` on one
shreds that id in the other too — as it must for the store's own copies (a backup, a
replica, a restore into another store), which the vault cannot tell apart from another
store. docs/retention-and-backup.md says so: stores that are not copies of each other
need a key file and vault each. (trialnbr: found as a silent neighbour effect; kept as
documented behaviour, not changed.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten
from statekeeper.governance.shredding import forget


async def test_a_forget_on_one_store_shreds_the_id_in_every_store_of_the_vault(
    tmp_path: Path,
) -> None:
    keys = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    async with (
        StateStore(f"sqlite:///{tmp_path / 'billing.db'}", keyring=keys) as billing,
        StateStore(f"sqlite:///{tmp_path / 'support.db'}", keyring=keys) as support,
    ):
        await billing.save("user-1", {"email": "alice@billing"})
        await support.save("user-1", {"email": "bob@support"})
        assert (await forget(billing, "user-1")).destroyed
    async with StateStore(f"sqlite:///{tmp_path / 'support.db'}", keyring=keys) as support:
        with pytest.raises(AgentForgotten):
            await support.load("user-1")
    # a vault of its own keeps the other store's agent
    own = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "own.db"))
    async with StateStore(f"sqlite:///{tmp_path / 'other.db'}", keyring=own) as other:
        await other.save("user-1", {"email": "carol@other"})
        assert (await other.load("user-1")).data == {"email": "carol@other"}
