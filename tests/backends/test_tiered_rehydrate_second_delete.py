"""A delete of a demoted agent while a *second* rehydration (one that found another's
claim) brings it back: the delete stands, and the claim owner's own end is still told
apart from it.

R1 claims the rehydration of "a" and is held before its first page lands in the durable
tier; R2 (another process) finds R1's claim and copies the agent back itself, held with
its first page read from the cold tier, before it lands. Meanwhile a third process
deletes "a" (acknowledged). R2 goes on. Before: R2 could not tell the delete (the
marker, the cold copy and the stream gone) from R1's normal end (the cold copy and the
marker gone beside the whole stream): its page landed on no stream — an agent of one
page came back whole and was served, and of several pages the part copied stayed (the
next page's read found the cold copy gone), no marker beside it, served as the agent.
Now each page R2 copies is committed only with a check that the marker is still R1's
claim (a delete deletes the marker before the stream): its page is refused, what it
copied is dropped, and the agent reads as deleted. R1's own end while R2 is held (the
agent whole) still leaves the agent whole.

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema, or a Redis prefix) and one cold SQLite file; held on hooked calls,
no timing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.base import Backend, KeptKeys
from statekeeper.backends.tiered import COLD_MARKER
from statekeeper.observability import instrument
from statekeeper.records import AppendRequest, AppendResult, RawSnapshot
from statekeeper.testing import request

from ._tiered_interleave import (
    MAKERS,
    Make,
    PageHeld,
    deleted_everywhere,
    demoted,
    held_at,
    processes,
)
from .test_tiered_claims import _Pause, _until


@MAKERS
@pytest.mark.parametrize("pages", [1, 3], ids=["one-page", "pages"])
async def test_a_delete_during_a_second_rehydration_is_not_undone(
    tmp_path: Path, make: Make, pages: int
) -> None:
    async with processes(tmp_path, make, 5) as (_, (setup, r1, r2, other, fresh)):
        await demoted(setup, pages)
        held1, held2 = PageHeld(r1), PageHeld(r2)
        t1 = await held_at(r1, held1)  # (R1's claim made)
        t2 = await held_at(r2, held2)  # (R2 found R1's claim: its first page in hand)
        assert await other.delete_agent("a")
        held2.go.set()
        assert await t2 == 0  # (before: 3 — the deleted agent — or an IntegrityError)
        held1.go.set()
        assert await t1 == 0
        await deleted_everywhere(setup, fresh)  # (before: 3, or 1 — a part)


@MAKERS
@pytest.mark.parametrize("pages", [1, 3], ids=["one-page", "pages"])
async def test_the_claims_own_end_during_a_second_rehydration_keeps_the_agent(
    tmp_path: Path, make: Make, pages: int
) -> None:
    """As above, but no delete: R1 goes on first, copies "a" back whole and ends its
    claim (the cold copy and the marker gone) while R2 is held; R2's page is refused
    too (the claim gone), and R2 finds the agent whole — not a delete: nothing dropped.
    (Passes before and after: it pins the rule that tells the two apart.)"""
    async with processes(tmp_path, make, 4) as (_, (setup, r1, r2, fresh)):
        await demoted(setup, pages)
        held1, held2 = PageHeld(r1), PageHeld(r2)
        t1 = await held_at(r1, held1)
        t2 = await held_at(r2, held2)
        held1.go.set()
        assert await t1 == 3
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (R1's end made)
        held2.go.set()
        assert await t2 == 3
        assert await fresh.head("a") == 3
        assert [e.seq for e in await fresh.read("a")] == [1, 2, 3]
        assert setup.cold is not None and await setup.cold.head("a") == 0
        assert sorted(i.agent_id for i in await fresh.list_agents()) == ["a", "b"]


@MAKERS
async def test_a_second_rehydration_that_loses_to_the_claims_owner_reads_the_agent(
    tmp_path: Path, make: Make
) -> None:
    """R2 (found R1's claim) holds its first page; R1 copies "a" back whole and is held
    before its end (the claim still the marker); R2's page is then refused (the stream
    is there). R2's load reads the agent R1 brought back. Before: it raised
    ConflictError ("expected head seq 0, stored head is 3"), the agent whole."""
    async with processes(tmp_path, make, 4) as (_, (setup, r1, r2, fresh)):
        await demoted(setup)
        held1, held2 = PageHeld(r1), PageHeld(r2)
        assert r1.cold is not None
        ending = _Pause(r1.cold, "delete_agent_at")
        t1 = await held_at(r1, held1)  # (R1's claim made)
        t2 = await held_at(r2, held2)  # (R2 found R1's claim: its first page in hand)
        held1.go.set()
        await _until(ending.reached, t1)  # (R1's copy whole, its end not made)
        held2.go.set()
        assert await t2 == 3  # (before: ConflictError)
        assert [e.seq for e in await r2.read("a")] == [1, 2, 3]
        ending.go.set()
        assert await t1 == 3
        assert await fresh.head("a") == 3
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (R1's end made)
        assert setup.cold is not None and await setup.cold.head("a") == 0


@MAKERS
@pytest.mark.parametrize("use", ["load", "append", "demote"])
async def test_a_claim_an_earlier_versions_delete_left_is_ended_on_the_next_use(
    tmp_path: Path, make: Make, use: str
) -> None:
    """Mixed versions: R1 (this version) claims the rehydration of "a" and is held
    before its first page lands; an earlier version's ``delete_agent_at`` (it brings
    the agent back itself and ends a marker of two records only) deletes the cold copy
    and the stream but not the claim's three records — made here by deleting the cold
    copy alone (the stream is not there yet). Before: every load of "a", and every
    write of a new agent of that id, raised IntegrityError (the cold copy of a demoted
    agent missing) and list_agents listed it. Now the next load, write or demotion ends
    the claim: the agent is absent, as the delete meant; R1 then finds it deleted."""
    async with processes(tmp_path, make, 3) as (_, (setup, r1, fresh)):
        await demoted(setup)
        held1 = PageHeld(r1)
        t1 = await held_at(r1, held1)  # (R1's claim made: the marker's third record)
        assert setup.cold is not None and await setup.cold.delete_agent("a")
        if use == "load":
            assert await fresh.head("a") == 0  # (before: IntegrityError)
            assert await fresh.read("a") == []
        elif use == "append":
            await fresh.append(request("a", 0))  # (before: IntegrityError)
            assert await fresh.head("a") == 1
        else:
            assert not await fresh.demote("a")
            assert await fresh.head("a") == 0
        assert await setup.durable.head(COLD_MARKER + "a") == 0
        held1.go.set()
        assert await t1 == (1 if use == "append" else 0)
        want = ["a", "b"] if use == "append" else ["b"]
        assert [i.agent_id for i in await fresh.list_agents()] == want
        assert await fresh.count_agents() == len(want)


@MAKERS
async def test_a_delete_during_a_second_rehydration_of_a_compacted_agent_stands(
    tmp_path: Path, make: Make
) -> None:
    """As the first test, of an agent compacted to a base and one page after it: R2's
    only page is the base's (``append_from_base``), now committed with the check of
    the marker too (``guard=``): refused, the agent stays deleted. Before: it
    committed no check, landed after the delete on no stream and the deleted agent
    was back whole, served to every process (SQLite, PostgreSQL, Redis)."""
    async with processes(tmp_path, make, 5) as (_, (setup, r1, r2, other, fresh)):
        await setup.durable.initialize()
        for seq in range(3):
            await setup.append(request("a", seq))
        await setup.save_snapshot("a", RawSnapshot(2, 1.0, b"snap", b""))
        await setup.prune("a", 2)
        await setup.append(request("b", 0))
        assert await setup.demote("a")
        held1, held2 = PageHeld(r1), PageHeld(r2)
        t1 = await held_at(r1, held1)  # (R1's claim made)
        t2 = await held_at(r2, held2)  # (R2 found R1's claim: its base page in hand)
        assert await other.delete_agent("a")
        held2.go.set()
        assert await t2 == 0  # (before: 3, the deleted agent back)
        held1.go.set()
        assert await t1 == 0
        await deleted_everywhere(setup, fresh)


class _OverrideBeforeGuard(SQLiteBackend):
    """A third party's SQLite subclass whose ``append_from_base`` override was written
    before ``guard=`` (it inherits ``guards_from_base``, not the argument)."""

    async def append_from_base(  # type: ignore[override]
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
    ) -> AppendResult:
        return await super().append_from_base(request, base, kept_keys, raise_floor=raise_floor)


def _before_guard(tmp_path: Path) -> Callable[[], Backend]:
    return lambda: _OverrideBeforeGuard(tmp_path / "durable.db")


def _observed_before_guard(tmp_path: Path) -> Callable[[], Backend]:
    def make() -> Backend:
        store = StateStore(_OverrideBeforeGuard(tmp_path / "durable.db"))
        instrument(store, registry=CollectorRegistry(), tracing=False)
        return store.backend  # (the instrumented wrapper of the engine)

    return make


@pytest.mark.parametrize(
    "make", [_before_guard, _observed_before_guard], ids=["override", "observed-override"]
)
async def test_a_second_rehydration_of_a_compacted_agent_on_an_override_before_guard(
    tmp_path: Path, make: Make
) -> None:
    """R2 finds R1's claim and copies the compacted agent back itself, its base page
    first, on a durable tier whose ``append_from_base`` override takes no ``guard``
    (directly, or through the instrumented wrapper): that page is appended as before
    the argument (unguarded), and both loads return the agent. Before: R2's copy
    passed ``guard=`` because the class declared ``guards_from_base`` — ``TypeError``
    (not a statekeeper error), the load failed."""
    async with processes(tmp_path, make, 4) as (_, (setup, r1, r2, fresh)):
        await setup.durable.initialize()
        for seq in range(3):
            await setup.append(request("a", seq))
        await setup.save_snapshot("a", RawSnapshot(2, 1.0, b"snap", b""))
        await setup.prune("a", 2)
        assert await setup.demote("a")
        held1, held2 = PageHeld(r1), PageHeld(r2)
        t1 = await held_at(r1, held1)  # (R1's claim made)
        t2 = await held_at(r2, held2)  # (R2 found R1's claim: its base page in hand)
        held2.go.set()
        assert await t2 == 3  # (before: TypeError, unexpected keyword argument 'guard')
        held1.go.set()
        assert await t1 == 3
        assert [e.seq for e in await fresh.read("a")] == [3]
        assert await setup.durable.head(COLD_MARKER + "a") == 0
