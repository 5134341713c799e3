"""The store's own streams (legal holds, the audit log) on a tiered store with a cold
tier: they are never demoted, so no cold marker is looked up for them.

Looking one up built the marker id ``\\x01sk-cold/`` + ``\\x01sk-holds/registry``, which
no backend accepts: every process after the one that placed a hold failed on its first
read of the holds (every purge, ``hold list``), every CLI command given keys failed
before it started (it looks for the audit log), and ``statekeeper restore`` of a backup
holding legal holds stopped with exit code 2 after writing its agents, holds not placed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM, HOLDS_STREAM
from statekeeper.backends import open_backend, tiered_url
from statekeeper.errors import AgentOnHold
from statekeeper.governance.holds import add_hold, list_holds
from statekeeper.security import Keyring, generate_key


def _url(tmp_path: Path) -> str:
    return tiered_url(
        hot="memory://",
        durable=f"sqlite:///{tmp_path / 'durable.db'}",
        cold=f"sqlite:///{tmp_path / 'cold.db'}",
        idle_after=3600,
    )


def test_holds_placed_by_one_process_are_read_by_the_next(tmp_path: Path) -> None:
    url = _url(tmp_path)
    keys = Keyring({"k1": generate_key()})

    async def place() -> None:
        async with StateStore(url, keyring=keys) as store:
            await store.save("acme/alice", {"email": "alice@example.com"})
            await add_hold(store, "acme/alice", "Smith v. Acme")

    async def later() -> list[str]:
        async with StateStore(url, keyring=keys) as store:  # a new process: nothing settled
            held = [h.pattern for h in await list_holds(store)]
            try:
                await store.delete("acme/alice")
            except AgentOnHold:
                return held
            raise AssertionError("a held agent was deleted")

    asyncio.run(place())
    assert asyncio.run(later()) == ["acme/alice"]


def test_a_read_only_opening_reads_the_store_own_streams(tmp_path: Path) -> None:
    url = _url(tmp_path)

    async def main() -> tuple[int, int, int]:
        async with StateStore(url) as store:
            await store.save("a", {"n": 1})
            await add_hold(store, "a", "kept")
        backend = open_backend(url, readonly=True)
        try:
            return (
                await backend.head(HOLDS_STREAM),
                await backend.head(AUDIT_STREAM),
                len(await backend.read(HOLDS_STREAM, 0, None)),
            )
        finally:
            await backend.close()

    holds_head, audit_head, records = asyncio.run(main())
    assert holds_head == records == 1
    assert audit_head == 0
