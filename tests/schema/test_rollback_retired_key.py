"""A rollback after a key rotation whose old key was retired (``keys status`` no longer
showed it, so it was removed from the keyring, as docs/security.md says to).

An agent written since its migration is rolled back through the model's downcasters:
its current state is all that needs reading. The rollback read its pre-migration
records anyway — sealed with the key active at the migration, which ``rekey`` does not
re-encrypt and ``keys status`` does not count below the head — and the whole rollback
stopped with ``KeyNotFound`` for a key it did not need. Now they are read only when
``force`` restores them; a rollback that does need the retired key (``force``, or an
agent not written since, restored byte for byte) says so with a typed error naming the
agent and the key id, and succeeds once the key is back."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import Keyring, StateStore
from statekeeper.errors import KeyNotFound
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import rollback
from statekeeper.security.rekey import key_usage, rekey

from . import apps
from .test_rollback_after_rekey import K1, K2, N, _seed_and_migrate

ROTATED = Keyring({"k1": K1, "k2": K2}, active="k2")
RETIRED = Keyring({"k2": K2})  # k1 removed after the rotation


async def _migrated_rotated(url: str, written: range) -> str:
    """N agents migrated under k1; k2 made active and the store re-encrypted; the
    agents ``written`` saved since; k1 no longer counted by ``keys status``."""
    run_id = await _seed_and_migrate(url, Keyring({"k1": K1}))
    async with StateStore(url, keyring=ROTATED) as store:
        await rekey(store)
        v2 = TypedStates(store, apps.support_v2)
        for i in written:
            state = await v2.load(f"s-{i}")
            state.escalated = True
            await v2.save(f"s-{i}", state)
    return run_id


async def test_agents_written_since_roll_back_without_the_retired_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _migrated_rotated(url, range(N))
    async with StateStore(url, keyring=RETIRED) as store:
        assert set(await key_usage(store)) == {"k2"}  # what told the user k1 was unused
        back = await rollback(store, apps.support_v2, run_id=run_id)
        assert back.ok and back.changed == N and back.target == 1, back.failed
        v1 = TypedStates(store, apps.support_v1)
        for i in range(N):
            assert (await v1.load(f"s-{i}")).customer_name == f"secret-{i}"


async def test_a_forced_rollback_that_needs_the_retired_key_names_agent_and_key(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _migrated_rotated(url, range(1))
    async with StateStore(url, keyring=RETIRED) as store:
        with pytest.raises(KeyNotFound, match=r"agent 's-\d' seq 1: .*key 'k1'") as raised:
            await rollback(store, apps.support_v2_bare, run_id=run_id, force=True)
        assert raised.value.key_id == "k1"
    async with StateStore(url, keyring=ROTATED) as store:  # the key back: it goes through
        back = await rollback(store, apps.support_v2_bare, run_id=run_id, force=True)
        assert back.ok and back.changed == N, back.failed
        assert back.forced == 1


async def test_a_restore_that_needs_the_retired_key_names_agent_and_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _migrated_rotated(url, range(0))  # restored byte for byte: k1 needed
    async with StateStore(url, keyring=ROTATED) as store:
        assert (await key_usage(store)).get("k1") == N + 1  # and keys status says so
    async with StateStore(url, keyring=RETIRED) as store:
        with pytest.raises(KeyNotFound, match=r"agent 's-\d' seq \d: .*key 'k1'"):
            await rollback(store, apps.support_v2, run_id=run_id)
    async with StateStore(url, keyring=ROTATED) as store:
        back = await rollback(store, apps.support_v2, run_id=run_id)
        assert back.ok and back.changed == N, back.failed
