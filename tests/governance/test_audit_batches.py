"""Concurrent writers racing on the same agents, in every durability mode: each stored
event has exactly one ok entry, no entry names an event that is not stored, and the
conflicts, retries and duplicates in between leave the log verifying (the batch paths
of ``AuditLog.write_with``: a conflicting write taken out of a shared commit, the log's
own head moved by another store, entries written ahead and voided)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError, RetriesExhausted, WriteBufferError
from statekeeper.governance import AuditLog

from .conftest import KEYRING


@pytest.mark.parametrize("durability", ["sync", "group", "async"])
async def test_racing_writers_leave_one_entry_per_stored_event(
    as_principal: Callable[..., StateStore], durability: str
) -> None:
    stores = [
        as_principal("ops", durability=durability, flush_size=4, flush_interval=3600)
        for _ in range(3)
    ]
    agents = [f"acme/support/t{i}" for i in range(3)]

    async def writer(store: StateStore, n: int) -> None:
        for i in range(12):
            agent = agents[(i + n) % len(agents)]
            try:
                await store.save(agent, {"by": n, "i": i}, idempotency_key=f"{n}-{i}")
                if i % 5 == 0:  # the same key again: a duplicate, recorded as one
                    await store.save(agent, {"by": n, "i": i}, idempotency_key=f"{n}-{i}")
            except (ConflictError, RetriesExhausted):
                pass

    await asyncio.gather(*(writer(store, n) for n, store in enumerate(stores)))
    for store in stores:
        # write-behind: buffered writes that lost the race fail at the flush (their
        # entries, in the same commit, with them), as the mode documents
        with contextlib.suppress(WriteBufferError):
            await store.flush()
    log = AuditLog(stores[0].backend, KEYRING)
    report = await log.verify()
    assert report.ok and not report.unapplied, (report.problems, report.unapplied)
    events = {(agent, event.seq) for agent in agents async for event in stores[0].history(agent)}
    voided = set()
    recorded: Counter[tuple[str, int]] = Counter()
    entries: list[Any] = [entry async for entry in log.entries()]
    for entry in entries:
        if isinstance(entry.detail.get("voids"), int):
            voided.add(entry.detail["voids"])
    for entry in entries:
        if entry.seq in voided or entry.outcome != "ok" or entry.detail.get("duplicate"):
            continue
        if entry.operation in ("save", "create"):
            for seq in range(entry.first_seq, entry.last_seq + 1):
                recorded[(entry.agent_id, seq)] += 1
    assert set(recorded) == events
    assert all(count == 1 for count in recorded.values()), recorded
