"""A delete of a demoted agent while another process brings it back: the delete stands.

R1 claims the rehydration of "a" and is held with its first page read from the cold
tier, before it lands in the durable tier. Meanwhile another process deletes "a"
(``delete_agent``: the cold copy, the marker, the stream; or ``delete_agent_at``, which
brings the agent back itself first) — acknowledged. R1 goes on: its page lands on no
stream. Before: an agent of one page came back whole (R1's copy, then its end: the
deleted agent served and kept, no error), and of several pages a part came back — the
next page's read found the cold copy gone, and R1 took the stream there for the agent
brought back by another process: its head 1 of 5, served as the agent. Now R1, finding
its claim gone (on these durable tiers only a delete ends a live process's claim), drops
what it copied (a delete conditional on the last record it wrote) and reads the agent as
deleted.

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema, or a Redis prefix) and one cold SQLite file; held on a hooked call,
no timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.backends.tiered import TieredBackend

from ._tiered_interleave import (
    MAKERS,
    Make,
    PageHeld,
    deleted_everywhere,
    demoted,
    held_at,
    processes,
)


async def _delete(backend: TieredBackend, op: str) -> None:
    if op == "delete_agent":
        assert await backend.delete_agent("a")
        return
    head = await backend.head("a")  # (brought back by this process too, R1's claim seen)
    last = (await backend.read("a", head - 1, head))[-1]
    assert await backend.delete_agent_at("a", head, last.checksum)


@MAKERS
@pytest.mark.parametrize("op", ["delete_agent", "delete_agent_at"])
@pytest.mark.parametrize("pages", [1, 3], ids=["one-page", "pages"])
async def test_a_delete_during_a_rehydration_is_not_undone(
    tmp_path: Path, make: Make, op: str, pages: int
) -> None:
    async with processes(tmp_path, make, 4) as (_, (setup, r1, other, fresh)):
        await demoted(setup, pages)
        copying = PageHeld(r1)
        t1 = await held_at(r1, copying)  # (its claim made, its first page in hand)
        await _delete(other, op)
        copying.go.set()
        assert await t1 == 0  # (before: 3, or 1 — a part)
        await deleted_everywhere(setup, fresh)  # (before: the deleted agent, or a part of it)
