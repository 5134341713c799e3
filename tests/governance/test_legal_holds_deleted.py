"""A store whose legal holds stream was deleted whole refuses every purge.

Every purge reads the store's holds stream; deleting it (its rows, with write access
to the database) made it read as "no holds", and retention, ``delete`` and ``forget``
went through on the held agents. The store is now marked once the holds' first record
is committed (as it is for the audit log), so a marked store without holds fails each
purge with :class:`IntegrityError` until the holds are placed again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentOnHold, IntegrityError
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.holds import add_hold, list_holds
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget
from statekeeper.security import Keyring, generate_key

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


def _delete_the_holds(path: Path) -> None:
    with sqlite3.connect(path) as db:
        for table in ("sk_events", "sk_snapshots", "sk_agents"):
            db.execute(f"DELETE FROM {table} WHERE agent_id = char(1) || 'sk-holds/registry'")


async def test_every_purge_fails_once_the_holds_are_deleted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    keyring = Keyring({"k1": generate_key()}, data_keys=str(tmp_path / "vault.db"))
    url = f"sqlite:///{path}"
    async with StateStore(url, keyring=keyring, principal="ops", policy=POLICY,
                          audit=Audit()) as store:  # fmt: skip
        for agent in ("acme/alice", "acme/bob", "legal/case-7"):
            await store.save(agent, {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
        await add_hold(store, "legal/*", "regulator inquiry")
    _delete_the_holds(path)
    async with StateStore(url, keyring=keyring, principal="ops", policy=POLICY,
                          audit=Audit()) as store:  # fmt: skip
        for purge in (
            lambda: apply_retention(
                store, RetentionPolicy.parse("* ttl=1s"), now=store.clock() + 3600
            ),
            lambda: store.delete("acme/alice"),
            lambda: store.delete("acme/bob"),  # never held: no purge can tell
            lambda: forget(store, "legal/case-7"),
            lambda: list_holds(store),
        ):
            with pytest.raises(IntegrityError, match="legal holds are missing"):
                await purge()
        for agent in ("acme/alice", "acme/bob", "legal/case-7"):
            assert (await store.load(agent)).data == {"n": 1}
        # placed again (from the audit log's entries): the holds stand, purges resume
        await add_hold(store, "acme/alice", "Smith v. Acme")
        with pytest.raises(AgentOnHold):
            await store.delete("acme/alice")
        assert await store.delete("acme/bob")


async def test_a_store_that_never_held_anything_purges_as_before(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.save("acme/bob", {"n": 1})
        assert await list_holds(store) == ()
        assert await store.delete("acme/bob")
