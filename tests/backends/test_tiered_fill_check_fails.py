"""A tiered store's hot fill whose check after the copy (:meth:`_still_copied`: the
durable stream read again) fails or is cancelled, while another store sharing the
tiers rewrote the agent between the fill's read of the stream and its write of the
copy (a rekey, a migration: the same head, head tag and base, new bytes).

The copy then holds the old bytes under the durable head and head tag, and every
store sharing the hot tier serves a copy whose head and tag match. The check is what
tells it apart — was: an error in it (the durable tier failing, the read cancelled by
its caller's timeout) left the copy unchecked in the hot tier, the old bytes served
by the other stores for good. Now the copy is dropped before the error goes on. The
interleaving is made with events (no timing); two processes: SQLite files shared by
path, the hot tier a SQLite file or a Redis prefix (``stores`` of
test_tiered_fill_rewrite_race)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import RewriteRequest

from .test_tiered_fill_rewrite_race import _agent, stores

__all__ = ["stores"]


async def _fill_checked(
    filler: TieredBackend, rewriter: TieredBackend, patch: pytest.MonkeyPatch, *, cancel: bool
) -> None:
    """``filler`` reads "a" (a miss: its hot copy filled), held after the fill's read of
    the stream until ``rewriter`` rewrote event 1; the fill's check then fails at its
    read of the stream (a ``BackendError``), or is cancelled there."""
    head, tag = await _agent(rewriter)
    old = (await rewriter.durable.read("a", 0, 1))[0]
    new = dataclasses.replace(old, payload=b"rekeyed", checksum=b"rekeyed-sum")
    copied, rewritten, checking = asyncio.Event(), asyncio.Event(), asyncio.Event()
    real = filler.durable.read
    calls = 0

    async def read(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:  # (the check's read: the copy written)
            checking.set()
            if not cancel:
                raise BackendError("the durable tier failed (injected)")
            await asyncio.Event().wait()  # (until cancelled)
        answer = await real(*args, **kw)
        if calls == 2:  # (the copy's read: the rewrite lands before the copy's write)
            copied.set()
            await rewritten.wait()
        return answer

    patch.setattr(filler.durable, "read", read)
    filling = asyncio.create_task(filler.read("a"))
    await copied.wait()
    await rewriter.rewrite(RewriteRequest("a", head, tag, (new,)))
    rewritten.set()
    await checking.wait()
    if cancel:
        filling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await filling
    else:
        with pytest.raises(BackendError, match="injected"):
            await filling
    patch.undo()


@pytest.mark.parametrize("cancel", [False, True], ids=["failed", "cancelled"])
async def test_a_fill_whose_check_did_not_finish_leaves_no_copy_served(
    stores: list[TieredBackend], cancel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler, rewriter, reader = stores
    await _fill_checked(filler, rewriter, monkeypatch, cancel=cancel)
    stored = await reader.durable.read("a")
    assert stored[0].payload == b"rekeyed"
    assert await reader.read("a") == stored  # was: the old payload of event 1
    assert await filler.read("a") == stored
