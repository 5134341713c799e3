"""The end of a rehydration's claim (the cold copy and the marker deleted) is always
made by its owner while it lives, whatever else happened meanwhile.

R1 claims the rehydration of "a" and is held before its first page lands in the durable
tier; R2 (another process) finds R1's claim, copies the agent back whole itself and
leaves the end to the claim's owner. R1 goes on: its page conflicts, and it finds the
agent back whole under its own claim. Before: R1 returned without its end too — nobody
ended the claim of a live process, so the marker and the cold copy stayed beside the
stream and no other process demoted the agent again while R1's lived (only a demotion
in R1's own process, a minute later). Now R1 ends it.

And a claim whose append failed with its reply lost (written, but an error): its token
stayed among this process's operations under way, so the claim was never taken up by
this process's next use, nor taken over by any demotion, while the process lived — the
agent never demoted again. Now the failed claim is no longer under way: the next use
takes it up and ends it.

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema, or a Redis prefix) and one cold SQLite file; held on hooked calls,
no timing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, AppendResult, RawSnapshot
from statekeeper.testing import request

from ._tiered_interleave import MAKERS, Make, PageHeld, demoted, held_at, processes
from .test_tiered_claims import _final_step, _Pause, _until
from .test_tiered_demote_concurrent import _HEAD, _process, _setup, _sqlite, _whole


async def _demoted(backend: TieredBackend) -> None:
    """``_setup``'s agent, its first append without a key: the copy's first page is
    no idempotent duplicate of another copy's (it conflicts)."""
    await backend.durable.initialize()
    for seq in range(_HEAD):
        await backend.append(request("a", seq, key=f"k{seq}" if seq else None))
        if seq == 2:
            await backend.save_snapshot("a", RawSnapshot(3, 1.0, b"snap", b""))
    assert await backend.demote("a")


@MAKERS
async def test_the_claims_owner_ends_a_rehydration_another_copied_back(
    tmp_path: Path, make: Make
) -> None:
    async with processes(tmp_path, make, 3) as (durable, (setup, r1, r2)):
        await _demoted(setup)
        copying = _Pause(r1.durable, "append", when=lambda req: req.agent_id == "a")
        t1 = asyncio.ensure_future(r1.head("a"))
        await _until(copying.reached, t1)  # (R1's claim made, its first page in hand)
        assert await setup.durable.head(COLD_MARKER + "a") == 3  # (R1's claim)
        assert await r2.head("a") == _HEAD  # R2 copies it back, leaves the end to R1
        assert await setup.durable.head(COLD_MARKER + "a") == 3
        copying.go.set()
        assert await t1 == _HEAD
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (before: 3, R1's claim)
        assert setup.cold is not None
        assert await setup.cold.head("a") == 0  # (before: the cold copy, left)
        await _whole(tmp_path, durable)  # (demoted again at once; before: False)


def _lost_reply(backend: TieredBackend) -> list[int]:
    """The first append to "a"'s marker is written, then fails as a lost reply."""
    call, failed = backend.durable.append, [0]

    async def append(request: AppendRequest) -> AppendResult:
        result = await call(request)
        if request.agent_id == COLD_MARKER + "a" and not failed[0]:
            failed[0] += 1
            raise BackendError("the reply was lost", maybe_applied=True)
        return result

    backend.durable.append = append  # type: ignore[method-assign]
    return failed


@MAKERS
async def test_a_rehydration_claim_whose_reply_was_lost_is_taken_up(
    tmp_path: Path, make: Make
) -> None:
    async with processes(tmp_path, make, 2) as (durable, (setup, r1)):
        await _setup(setup, demoted=True)
        failed = _lost_reply(r1)
        with pytest.raises(BackendError, match="reply was lost"):
            await r1.head("a")
        assert failed == [1]
        assert await setup.durable.head(COLD_MARKER + "a") == 3  # (its claim, written)
        assert await r1.head("a") == _HEAD  # this process's next use takes it up, ends it
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (before: 3, for ever)
        # (and, were it left, a demotion of this process an hour on takes it over)
        later = TieredBackend(
            durable(), cold=setup.cold, idle_after=1, clock=lambda: time.time() + 3600
        )
        try:
            assert await later.demote("a")  # (before: False while this process lived)
            assert await later.head("a") == _HEAD
        finally:
            await later.durable.close()
        await _whole(tmp_path, durable)


@MAKERS
async def test_the_claims_owner_ends_it_when_another_copied_back_over_a_part(
    tmp_path: Path, make: Make
) -> None:
    """The same when R1 found the part an interrupted rehydration left (it drops the
    part, then copies): R2 dropped it and copied the agent back whole first."""
    async with processes(tmp_path, make, 3) as (durable, (setup, r1, r2)):
        await _demoted(setup)
        assert setup.cold is not None
        part = await setup.cold.read("a", 0, 1)  # (what a killed rehydration copied)
        await setup.durable.append(AppendRequest("a", 0, tuple(part)))
        dropping = _Pause(r1, "_drop_partial")
        t1 = asyncio.ensure_future(r1.head("a"))
        await _until(dropping.reached, t1)  # (R1's claim made)
        assert await setup.durable.head(COLD_MARKER + "a") == 3
        assert await r2.head("a") == _HEAD  # R2 drops the part, copies it back whole
        dropping.go.set()
        assert await t1 == _HEAD
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (before: 3, R1's claim)
        assert await setup.cold.head("a") == 0  # (before: the cold copy, left)
        await _whole(tmp_path, durable)


@MAKERS
async def test_an_end_never_touches_a_new_agents_demotion(tmp_path: Path, make: Make) -> None:
    """R1 (its claim made over a part) is held; meanwhile "a" is deleted (its claim with
    it), a new "a" of as many events written, and demoted by D — held before its last
    step, its whole cold copy made. R1 finds a stream of the demoted head: not its
    claim's to end (the marker is D's), so D's cold copy is left, and D's demotion
    finishes with the new agent whole in the cold tier."""
    async with processes(tmp_path, make, 4) as (_, (setup, r1, other, d)):
        await _demoted(setup)
        assert setup.cold is not None
        part = await setup.cold.read("a", 0, 1)
        await setup.durable.append(AppendRequest("a", 0, tuple(part)))
        dropping = _Pause(r1, "_drop_partial")
        t1 = asyncio.ensure_future(r1.head("a"))
        await _until(dropping.reached, t1)  # (R1's claim made)
        assert await other.delete_agent("a")
        for seq in range(_HEAD):
            await other.append(request("a", seq, timestamp=100.0 + seq))
        last = _final_step(d)
        t3 = asyncio.ensure_future(d.demote("a"))
        await _until(last.reached, t3)  # (D's whole copy made, before its last step)
        dropping.go.set()
        assert await t1 == _HEAD  # (the new agent, in the durable tier still)
        last.go.set()
        assert await t3 is True
        assert await setup.cold.head("a") == _HEAD  # (before: 0, deleted by R1's end)
        loaded = await other.read("a")  # (before: IntegrityError, the new agent lost)
        assert [e.timestamp for e in loaded] == [100.0 + seq for seq in range(_HEAD)]


async def test_an_earlier_versions_rehydration_left_beside_the_stream_is_never_taken_over(
    tmp_path: Path,
) -> None:
    """A rehydration of an earlier version (no claim: its marker the demotion's, naming
    no owner) that copied the agent back and never ended: nothing proves its process
    gone — it may still be about to end it, deleting the cold copy and the marker a new
    demotion would have made — so no demotion takes it over, however old; the agent is
    read in the durable tier, whole, and a delete still clears every tier."""
    durable = _sqlite(tmp_path)
    setup = _process(tmp_path, durable)
    later = TieredBackend(
        durable(),
        cold=SQLiteBackend(tmp_path / "cold.db"),
        idle_after=1,
        clock=lambda: time.time() + 3600,
    )
    try:
        await _demoted(setup)
        assert setup.cold is not None
        copied = await setup.cold.read("a")  # (its copy back, then killed)
        await setup.durable.append(AppendRequest("a", 0, tuple(copied)))
        assert await later.head("a") == _HEAD
        assert await later.demote("a") is False
        assert await setup.durable.head(COLD_MARKER + "a") == 2  # (the demotion's)
        assert await later.delete_agent("a")
        assert await setup.cold.head("a") == 0
        assert await setup.durable.head(COLD_MARKER + "a") == 0
    finally:
        await setup.close()
        await later.close()


@MAKERS
async def test_two_rehydrations_that_drop_each_others_part_both_read_the_agent(
    tmp_path: Path, make: Make
) -> None:
    """R1 (the claim's owner) lands its first page of three and is held before its
    second; R2 finds R1's claim beside that part, drops it (it cannot tell it from
    what a killed rehydration left), lands its own first page and is held before its
    second. R1 goes on: its page conflicts, and it drops R2's part. Before: both loads
    raised ConflictError ("its head record (seq 1) was rewritten since this process
    read it (by `statekeeper migrate`…", "expected head seq 1, stored head is 0") —
    loads, of an agent whole in the cold tier. Now R1 starts its copy again and ends
    its claim; R2 finds the agent whole."""
    async with processes(tmp_path, make, 4) as (_, (setup, r1, r2, fresh)):
        await demoted(setup, pages=3)
        held1, held2 = PageHeld(r1, nth=2), PageHeld(r2, nth=2)
        t1 = await held_at(r1, held1)  # (its claim made, its first page landed)
        t2 = await held_at(r2, held2)  # (R1's part dropped, its own first page landed)
        held1.go.set()
        assert await t1 == 3  # (before: ConflictError)
        held2.go.set()
        assert await t2 == 3  # (before: ConflictError)
        assert [e.seq for e in await fresh.read("a")] == [1, 2, 3]
        assert await setup.durable.head(COLD_MARKER + "a") == 0  # (R1's end made)
        assert setup.cold is not None and await setup.cold.head("a") == 0
        assert (await fresh.append(request("a", 2, key="k2"))).duplicate  # (its keys too)
