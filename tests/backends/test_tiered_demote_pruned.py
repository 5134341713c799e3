"""A change that keeps the head record (a prune, a key rename, a rewrite below the
head: none moves the head or alters its record) made by another process while a
demotion of the agent is held before its last step (hooked, no timing). Before: that
step, conditional on the head record alone, deleted the stream; the cold copy made
before the change became the agent — the pruned history, the keys under their old
names, the records' old bytes back at the next load, no error (SQLite, PostgreSQL,
Redis). Now the change fences the demotion's claim first (another head tag on its
marker): its last step deletes nothing, its clean-up deletes its cold copy and marker,
and the changed stream stays in the durable tier — and again after the change (a
demotion that claimed the agent while the change was held before its commit)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.records import RawEvent, RewriteRequest
from statekeeper.testing import request

from ._tiered_interleave import MAKERS, Make, processes
from .test_tiered_claims import _final_step, _Pause, _redis, _until
from .test_tiered_demote_concurrent import _HEAD, _postgres, _setup, _sqlite


async def _prune(b: TieredBackend) -> None:
    await b.prune("a", 3)


async def _rename(b: TieredBackend) -> None:
    assert await b.rename_keys("a", [("k1", "n1")]) == 1


async def _rewrite(b: TieredBackend) -> None:
    """A rewrite of a record below the head (a rekey rewrites a long stream in parts)."""
    head, tag = await b.head_tag("a")
    first = (await b.read("a", 0, 1))[0]
    again = RawEvent(1, first.type, first.timestamp, b"rekeyed", first.checksum)
    await b.rewrite(RewriteRequest("a", head, tag, (again,)))


async def _rewritten(b: TieredBackend) -> None:
    assert (await b.read("a", 0, 1))[0].payload == b"rekeyed"  # (before: the old bytes)


async def _pruned(b: TieredBackend) -> None:
    assert (await b.read("a"))[0].seq == 4  # (before: 1, the history back)


async def _renamed(b: TieredBackend) -> None:
    names = [k for k, _, _ in await b.idempotency_keys("a")]
    assert "n1" in names and "k1" not in names  # (before: k1, n1 lost)


_CHANGES = pytest.mark.parametrize(
    ("change", "kept"),
    [(_prune, _pruned), (_rename, _renamed), (_rewrite, _rewritten)],
    ids=["prune", "rename_keys", "rewrite"],
)


@_CHANGES
@MAKERS
async def test_a_change_during_a_demotion_is_kept(
    tmp_path: Path,
    make: Make,
    change: Callable[[TieredBackend], Awaitable[None]],
    kept: Callable[[TieredBackend], Awaitable[None]],
) -> None:
    async with processes(tmp_path, make, 4) as (_, (setup, d1, other, fresh)):
        await _setup(setup)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)  # (its cold copy whole, its claim the marker)
        await change(other)
        last.go.set()
        assert await t1 is False  # (not demoted: the change is kept in the durable tier)
        await kept(fresh)
        assert await fresh.durable.head("a") == _HEAD
        assert await fresh.durable.head(COLD_MARKER + "a") == 0  # (its claim ended,
        assert fresh.cold is not None and await fresh.cold.head("a") == 0  # its copy too)
        assert (await fresh.append(request("a", _HEAD))).last_seq == _HEAD + 1
        assert await fresh.demote("a")  # (and demotes cleanly later)
        await kept(fresh)


class _Unfenced(SQLiteBackend):
    """A durable tier that commits no several streams at once (as a Redis cluster):
    a demotion's last step is a delete conditional on the head record alone."""

    appends_together = False


def _unfenced(tmp_path: Path) -> TieredBackend:
    """A process's tiered engine on the :class:`_Unfenced` durable tier (the files of
    ``tmp_path``, shared by every such process)."""
    durable = _Unfenced(tmp_path / "durable.db")
    return TieredBackend(durable, cold=SQLiteBackend(tmp_path / "cold.db"), idle_after=1)


async def test_a_prune_during_a_demotion_on_a_tier_without_fencing(tmp_path: Path) -> None:
    setup, d1, other, fresh = (_unfenced(tmp_path) for _ in range(4))
    try:
        await _setup(setup)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)
        await _prune(other)
        last.go.set()
        assert await t1 is True  # (its copy pruned too: tiered_unfenced)
        await _pruned(fresh)  # (was: the history back)
        assert await fresh.durable.head("a") == _HEAD  # (brought back, pruned)
    finally:
        for t in (setup, d1, other, fresh):
            await t.close()


_DURABLE_CALL: dict[Callable[[TieredBackend], Awaitable[None]], str] = {
    _prune: "prune",
    _rename: "rename_keys",
    _rewrite: "rewrite",
}


@_CHANGES
@MAKERS
async def test_a_change_whose_demotion_claimed_after_its_fence_is_kept(
    tmp_path: Path,
    make: Make,
    change: Callable[[TieredBackend], Awaitable[None]],
    kept: Callable[[TieredBackend], Awaitable[None]],
) -> None:
    """The change finds no claim (nothing to fence) and is held before its durable
    call; another process's demotion then claims and copies the agent (the stream as it
    was) and is held before its last step; the change commits, then that step goes on.
    Before: the change fenced only a claim it found before it; that step, conditional
    on the head record alone, deleted the changed stream — its copy from before the
    change the agent at the next load, no error."""
    async with processes(tmp_path, make, 4) as (_, (setup, d1, other, fresh)):
        await _setup(setup)
        held = _ChangeCommit(other.durable, _DURABLE_CALL[change])
        t2 = asyncio.ensure_future(change(other))
        await _until(held.reached, t2)  # (its fence found nothing: no claim yet)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)  # (its copy, of the stream before the change, whole)
        held.go.set()
        await t2
        last.go.set()
        assert await t1 is False
        await kept(fresh)
        assert await fresh.durable.head("a") == _HEAD
        assert await fresh.durable.head(COLD_MARKER + "a") == 0
        assert fresh.cold is not None and await fresh.cold.head("a") == 0


def _is_a(req: object) -> bool:
    return getattr(req, "agent_id", req) == "a"


def _changes_a(name: str, args: tuple[object, ...]) -> bool:
    """Is a durable call ``name(*args)`` the commit of a prune, a key rename or a
    rewrite of "a"? (That call, or ``append_together`` with a prune or a rewrite of "a"
    among its changes: committed with the marker's check.)"""
    if name != "append_together":
        return _is_a(args[0])
    changes = args[1] if len(args) > 1 else ()
    return isinstance(changes, list | tuple) and any(
        getattr(c, "agent_id", None) == "a"
        and (getattr(c, "prune_to", None) is not None or getattr(c, "rewrite", None) is not None)
        for c in changes
    )


class _ChangeCommit:
    """Holds the first commit of a change of "a" by ``obj`` (``name``, or
    ``append_together``: :func:`_changes_a`) before it is made (:attr:`reached`,
    :attr:`go`) and, with ``after``, once one has returned, after it (:attr:`done`,
    :attr:`on`)."""

    def __init__(self, obj: object, name: str = "prune", *, after: bool = False) -> None:
        self.reached, self.go = asyncio.Event(), asyncio.Event()
        self.done, self.on = asyncio.Event(), asyncio.Event()
        if not after:
            self.on.set()
        for hooked in (name, "append_together"):
            setattr(obj, hooked, self._hook(hooked, getattr(obj, hooked)))

    def _hook(self, name: str, call: Callable[..., Awaitable[object]]) -> Callable[..., object]:
        async def hooked(*args: object, **kwargs: object) -> object:
            if not _changes_a(name, args):
                return await call(*args, **kwargs)
            if not self.reached.is_set():
                self.reached.set()
                await self.go.wait()
            made = await call(*args, **kwargs)
            if not self.done.is_set():
                self.done.set()
                await self.on.wait()
            return made

        return hooked


@MAKERS
async def test_a_demotion_done_between_a_prune_and_its_second_look(
    tmp_path: Path, make: Make
) -> None:
    """The prune finds no claim and is held before its commit; another process's
    demotion claims and copies the stream (as it was) and is held before its last
    step; the prune is let commit, and held after; that step goes on. Before (on
    PostgreSQL and Redis until their ``append_together`` took changes alone): the
    prune committed without a check of the marker and that step, conditional on the
    head record and its own claim, deleted the pruned stream before the prune's second
    look — the history back at the next load. Now the prune commits only with the
    marker's check (absent, then the claim given another head tag in the same commit):
    that step deletes nothing."""
    async with processes(tmp_path, make, 4) as (_, (setup, d1, other, fresh)):
        await _setup(setup)
        held = _ChangeCommit(other.durable, after=True)
        t2 = asyncio.ensure_future(_prune(other))
        await _until(held.reached, t2)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)
        held.go.set()
        await _until(held.done, t2)  # (the prune committed, not looked again yet)
        last.go.set()
        await t1
        held.on.set()
        await t2
        await _pruned(fresh)  # (before: the history back)
        assert await fresh.durable.head("a") == _HEAD


@pytest.mark.parametrize(
    ("make", "change", "kept"),
    [
        pytest.param(make, change, kept, id=f"{name}-{what}")
        for name, make in (("sqlite", _sqlite), ("postgres", _postgres), ("redis", _redis))
        for what, change, kept in (
            ("rename_keys", _rename, _renamed),
            ("rewrite", _rewrite, _rewritten),
        )
    ],
)
async def test_a_demotion_done_between_a_change_and_its_second_look(
    tmp_path: Path,
    make: Make,
    change: Callable[[TieredBackend], Awaitable[None]],
    kept: Callable[[TieredBackend], Awaitable[None]],
) -> None:
    """As the prune's test above, of a key rename and a rewrite below the head: the
    change finds no claim and is held before its commit; a demotion claims and copies
    the stream as it was, and is held before its last step; the change commits and is
    held before its second look; that step goes on. Before (and still for a rename):
    that step, conditional on the head record (which neither change alters) and its
    own claim, deleted the changed stream — the demotion True, the copy from before the
    change the agent at the next load, no error. Now a rewrite commits only with the
    marker's check, as a prune (PostgreSQL and Redis too: their ``append_together``
    takes changes alone), and a rename too (``rename_keys(..., guard=...)``)."""
    async with processes(tmp_path, make, 4) as (_, (setup, d1, other, fresh)):
        await _setup(setup)
        held = _ChangeCommit(other.durable, _DURABLE_CALL[change], after=True)
        t2 = asyncio.ensure_future(change(other))
        await _until(held.reached, t2)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)
        held.go.set()
        await _until(held.done, t2)  # (the change committed, not looked again yet)
        last.go.set()
        demoted = await t1
        held.on.set()
        await t2
        await kept(fresh)  # (before: the stream as it was demoted, the change undone)
        assert await fresh.durable.head("a") == _HEAD
        assert demoted is False  # (its last step deleted nothing)


async def test_a_prune_during_a_demotions_copy_on_a_tier_without_fencing(
    tmp_path: Path,
) -> None:
    """The same, the demotion held before it copies the snapshot (its events copied,
    its base look to come): either the prune prunes its copy or its look sees the prune
    — the agent, wherever it ends up, is the pruned stream."""

    setup, d1, other, fresh = (_unfenced(tmp_path) for _ in range(4))
    try:
        await _setup(setup)
        assert d1.cold is not None
        copying = _Pause(d1.cold, "save_snapshot")
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(copying.reached, t1)
        await _prune(other)
        copying.go.set()
        await t1
        await _pruned(fresh)  # (was: the history back)
        assert await fresh.durable.head("a") == _HEAD
    finally:
        for t in (setup, d1, other, fresh):
            await t.close()
