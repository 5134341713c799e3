"""The window left between a rehydration's look at its claim and its delete of the
cold copy (two tiers, two engines: no one atomic step holds both).

R1 copied "a" back whole under its claim and is held right before its conditional
delete of the cold copy (head and head checksum). Meanwhile another process deletes
"a", writes a new agent of that id with the same records (the same checksums) and
demotes it. Was: that demotion was held before its last step (its cold copy whole),
R1's delete, conditional on the cold tier alone, deleted that copy, and the last step
then deleted the stream: the new agent in no tier, every load an IntegrityError (a
strict xfail until closed). Now R1's end is announced in the durable tier while the
marker is its claim (``tiered_ending``): the demotion, seeing it, makes no last step,
or, seeing none, sees its copy whole only if R1's delete cannot come any more. Held on
hooked calls, no timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.tiered_claims import CLAIM_STALE, COLD_MARKER
from statekeeper.backends.tiered_ending import ENDING, announce_end
from statekeeper.backends.tiered_owner import IN_FLIGHT, claim_owner
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.testing import request

from ._tiered_interleave import MAKERS, Make, processes
from .test_tiered_claims import _final_step, _Pause, _until


async def _reached_or_done(event: asyncio.Event, task: asyncio.Future[bool]) -> None:
    """Wait until ``event`` is set or ``task`` ended (either is fine here)."""
    waiter: asyncio.Future[Any] = asyncio.ensure_future(event.wait())
    either: list[asyncio.Future[Any]] = [waiter, task]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if not event.is_set():
        waiter.cancel()


async def _ending_held_and_a_new_agent(
    setup: TieredBackend, r1: TieredBackend, other: TieredBackend
) -> tuple[_Pause, asyncio.Future[int]]:
    """Agent "a" (3 events) demoted; R1 (``r1``) bringing it back, held right before its
    delete of the cold copy (its claim looked at: still R1's); meanwhile ``other``
    deleted "a" and wrote a new agent of that id with the same records. R1's pause
    and its task."""
    await setup.durable.initialize()
    for seq in range(3):
        await setup.append(request("a", seq))
    assert await setup.demote("a")
    assert r1.cold is not None
    ending = _Pause(r1.cold, "delete_agent_at")
    t1 = asyncio.ensure_future(r1.head("a"))
    await _until(ending.reached, t1)
    assert await other.delete_agent("a")
    for seq in range(3):
        await other.append(request("a", seq))
    return ending, t1


@MAKERS
async def test_a_new_agents_demotion_survives_a_rehydrations_late_end(
    tmp_path: Path, make: Make
) -> None:
    async with processes(tmp_path, make, 5) as (_, (setup, r1, other, d3, fresh)):
        ending, t1 = await _ending_held_and_a_new_agent(setup, r1, other)
        last = _final_step(d3)
        t3 = asyncio.ensure_future(d3.demote("a"))
        # (was: held there, its cold copy whole; now it sees R1's end announced and
        # stops before it)
        await _reached_or_done(last.reached, t3)
        ending.go.set()
        assert await t1 == 3
        last.go.set()
        demoted = await t3
        assert await fresh.head("a") == 3  # (was: IntegrityError, its cold copy gone)
        assert [e.seq for e in await fresh.read("a")] == [1, 2, 3]
        assert d3.cold is not None
        if not demoted:  # (the agent stays in the durable tier; no copy of it left)
            assert await d3.cold.head("a") == 0
        # (and it is demoted as ever once R1's end is over)
        assert await d3.demote("a")
        assert await fresh.head("a") == 3


@MAKERS
async def test_a_new_agents_whole_demotion_survives_a_rehydrations_late_end(
    tmp_path: Path, make: Make
) -> None:
    """The same, the new agent's demotion run to its end while R1 is held. Was: it
    returned True, then R1's delete took its copy — the agent in no tier."""
    async with processes(tmp_path, make, 5) as (_, (setup, r1, other, d3, fresh)):
        ending, t1 = await _ending_held_and_a_new_agent(setup, r1, other)
        demoted = await d3.demote("a")  # (now: False, R1's end announced)
        ending.go.set()
        assert await t1 == 3
        assert await fresh.head("a") == 3  # (was: IntegrityError)
        assert [e.seq for e in await fresh.read("a")] == [1, 2, 3]
        if not demoted:
            assert await d3.demote("a")
            assert await fresh.head("a") == 3


@MAKERS
async def test_an_end_announced_by_a_process_gone_is_taken_over(tmp_path: Path, make: Make) -> None:
    """A rehydration killed between announcing its end and withdrawing it leaves the
    announcement: demotions of the agent make no last step while its process may live
    (the agent stays whole in the durable tier), and take it over once that process is
    provably gone and the announcement older than ``CLAIM_STALE``."""
    async with processes(tmp_path, make, 2) as (_, (setup, d2)):
        await setup.durable.initialize()
        for seq in range(3):
            await setup.append(request("a", seq))
        assert await setup.demote("a")
        assert await setup.head("a") == 3  # (brought back: its claim, then its end)
        claim = {"_seq": 1, "_token": "00" * 16}  # (a stand-in: the marker is gone)
        assert await announce_end(setup.durable, "a", claim, setup.clock()) is None
        # the announcement as a killed rehydration leaves it: its claim still the marker
        mark = RawEvent(1, "cold", 0.0, b"{}", b"m" * 16)
        await setup.durable.append(AppendRequest(COLD_MARKER + "a", 0, (mark,), head_tag=b"m" * 16))
        held = {"_seq": 1, "_token": (b"m" * 16).hex()}
        token = await announce_end(setup.durable, "a", held, setup.clock())
        assert token is not None
        await setup.durable.delete_agent(COLD_MARKER + "a")
        assert not await d2.demote("a")  # (its process is this one, still under way)
        assert await d2.durable.head("a") == 3
        IN_FLIGHT.discard(token)  # (its operation no longer under way: "killed")
        assert not await d2.demote("a")  # (not yet stale)
        now = d2.clock()
        d2.clock = lambda: now + CLAIM_STALE + 1
        assert await d2.demote("a")
        assert await d2.durable.head(ENDING + "a") == 0
        assert await d2.head("a") == 3


@MAKERS
async def test_a_rehydrations_end_takes_over_an_announcement_left_by_a_process_gone(
    tmp_path: Path, make: Make
) -> None:
    """An announcement a killed rehydration left (its process gone, older than
    ``CLAIM_STALE``) does not stop the next rehydration's end: deleted, then its own
    made — the cold copy and the marker deleted as ever."""
    async with processes(tmp_path, make, 2) as (_, (setup, r1)):
        await setup.durable.initialize()
        for seq in range(3):
            await setup.append(request("a", seq))
        assert await setup.demote("a")
        body = orjson.dumps({"claimed": 0.0, "owner": claim_owner()})  # (its token: gone)
        left = RawEvent(1, "end", 0.0, body, b"e" * 16)
        await setup.durable.append(AppendRequest(ENDING + "a", 0, (left,)))
        assert await r1.head("a") == 3
        assert await r1.durable.head(COLD_MARKER + "a") == 0
        assert await r1.durable.head(ENDING + "a") == 0
        assert r1.cold is not None and await r1.cold.head("a") == 0
