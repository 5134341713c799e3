"""A rollback after ``statekeeper rekey``: a migration keeps each agent's
pre-migration records inside its rewritten head event, sealed as they were stored —
in the clear, or under the key active then. ``rekey`` re-encrypts the event around
them but not them. A rollback that put them back byte for byte after the store was
encrypted restored records in the clear into an encrypted store (refused: "an
encrypted store accepts no plaintext", the rollback impossible), and after a key
rotation restored records under the retired key (``keys status`` had said it was
unused). The rollback re-seals them as the codec seals now: the same content, chain
link and place, under the active key."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from statekeeper import Keyring, StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate, rollback
from statekeeper.security import generate_key
from statekeeper.security.rekey import key_usage, rekey

from . import apps

K1, K2 = generate_key(), generate_key()
N = 4


async def _seed_and_migrate(url: str, keyring: Keyring | None) -> str:
    async with StateStore(url, keyring=keyring) as store:
        states = TypedStates(store, apps.support_v1)
        for i in range(N):
            await states.create(f"s-{i}", apps.SupportV1(customer_name=f"secret-{i}"))
        await store.snapshot("s-1")  # a snapshot at the head: kept and restored too
        report = await migrate(store, apps.support_v2)
        assert report.ok and report.changed == N
        return report.run_id


async def _rolled_back(url: str, keyring: Keyring, run_id: str, written: bool) -> None:
    async with StateStore(url, keyring=keyring) as store:
        await rekey(store)
        if written:  # one agent written since its migration: rolled back by a downcast
            v2 = TypedStates(store, apps.support_v2)
            state = await v2.load("s-0")
            state.escalated = True
            await v2.save("s-0", state)
        back = await rollback(store, apps.support_v2, run_id=run_id)
        assert back.ok and back.changed == N and back.target == 1
        assert set(await key_usage(store)) == {keyring.active_id}
        assert not (await store.verify()).problems
        v1 = TypedStates(store, apps.support_v1)
        for i in range(N):
            assert (await v1.load(f"s-{i}")).customer_name == f"secret-{i}"


async def test_a_rollback_after_the_store_was_encrypted(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    run_id = await _seed_and_migrate(f"sqlite:///{db}", None)
    await _rolled_back(f"sqlite:///{db}", Keyring({"k1": K1}), run_id, written=False)
    with sqlite3.connect(db) as raw:
        rows = raw.execute("select payload from sk_events").fetchall()
        rows += raw.execute("select payload from sk_snapshots").fetchall()
    assert rows and not any(b"secret-" in bytes(r[0]) for r in rows)


async def test_a_rollback_after_a_key_rotation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _seed_and_migrate(url, Keyring({"k1": K1}))
    both = Keyring({"k1": K1, "k2": K2}, active="k2")
    await _rolled_back(url, both, run_id, written=False)
    async with StateStore(url, keyring=Keyring({"k2": K2})) as store:  # k1 retired
        v1 = TypedStates(store, apps.support_v1)
        assert (await v1.load("s-1")).customer_name == "secret-1"


async def test_an_agent_written_since_is_rolled_back_after_rekey(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _seed_and_migrate(url, None)
    await _rolled_back(url, Keyring({"k1": K1}), run_id, written=True)


async def test_keys_status_counts_the_kept_records_under_a_rotated_key(tmp_path: Path) -> None:
    """After a rotation (k1 → k2) the migrated head events, re-encrypted under k2, still
    keep the pre-migration records under k1: ``keys status`` counted no k1, and once k1
    was removed a rollback raised ``KeyNotFound``. They count under k1 until the run is
    rolled back (or finalized)."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_id = await _seed_and_migrate(url, Keyring({"k1": K1}))
    both = Keyring({"k1": K1, "k2": K2}, active="k2")
    async with StateStore(url, keyring=both) as store:
        await rekey(store)
        usage = await key_usage(store)
        assert usage.get("k1") == N + 1  # N kept events and the kept snapshot of s-1
        back = await rollback(store, apps.support_v2, run_id=run_id)
        assert back.ok and back.changed == N
        assert set(await key_usage(store)) == {"k2"}
