"""Passes over every agent of a model (migrate, its dry run and append method, rollback,
expire) on a store holding an agent ``forget`` crypto-shredded: the forgotten agent has
no state and is passed over; the others are done. Each pass failed whole with
``AgentForgotten`` at the first forgotten agent (a store with one could never be
migrated again)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten
from statekeeper.governance.shredding import forget
from statekeeper.schema import TypedStates
from statekeeper.schema.expiry import expire
from statekeeper.schema.migrate import migrate, rollback
from statekeeper.schema.structures import Session

from .apps import SupportV1, support_v1, support_v2


def _store(tmp_path: Path) -> StateStore:
    keys = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    return StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys)


async def _agents(store: StateStore) -> None:
    old = TypedStates(store, support_v1)
    for i in range(4):
        await old.create(f"a{i}", SupportV1(customer_name=f"C{i}", priority="high"))


@pytest.mark.parametrize(
    "how",
    [{"dry_run": True}, {"method": "append"}, {"method": "rewrite"}],
    ids=["dry-run", "append", "rewrite"],
)
async def test_a_migration_passes_over_a_forgotten_agent(
    tmp_path: Path, how: dict[str, object]
) -> None:
    async with _store(tmp_path) as store:
        await _agents(store)
        await forget(store, "a1")
        report = await migrate(store, support_v2, **how)  # type: ignore[arg-type]
        assert (report.changed, report.failed, report.problems) == (3, [], [])
        if how.get("dry_run"):
            return
        typed = TypedStates(store, support_v2)
        assert [(await typed.load(f"a{i}")).customer for i in (0, 2, 3)] == ["C0", "C2", "C3"]
        with pytest.raises(AgentForgotten):
            await store.load("a1")


async def test_a_rollback_passes_over_an_agent_forgotten_since_the_migration(
    tmp_path: Path,
) -> None:
    async with _store(tmp_path) as store:
        await _agents(store)
        journal = tmp_path / "journal.json"
        assert (await migrate(store, support_v2, journal=journal)).changed == 4
        await forget(store, "a2")
        back = await rollback(store, support_v2, journal=journal)
        assert (back.changed, back.failed) == (3, [])
        assert (await TypedStates(store, support_v1).load("a3")).customer_name == "C3"


async def test_expire_passes_over_a_forgotten_session(tmp_path: Path) -> None:
    long_ago = time.time() - 3600
    async with _store(tmp_path) as store:
        sessions = TypedStates(store, Session)
        for name in ("s1", "s2"):
            await sessions.save(
                name, Session(user_id="u", started_at=long_ago, last_seen=long_ago, ttl=60)
            )
        await forget(store, "s1")
        assert await expire(store, Session) == ["s2"]
