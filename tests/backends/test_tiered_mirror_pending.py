"""Appends mirrored into the hot tier onto a copy a fill wrote (:mod:`.tiered_hot`):
a copy still under its fill's pending head tag, and one of an untagged stream
promoted to the stand-in tag ``UNTAGGED``.

An append without ``check_tag`` (a store whose cached tag is not known, a raw caller)
mirrored onto a pending copy gave it the durable head and tag: served, unchecked —
was: a fill that copied the stream before another store rewrote it (a rekey: the same
head, head tag and base, new bytes) served the old bytes to every store sharing the hot
tier from that append on. Now such a mirror reads the copy's tag first (only these
appends: a store's tagged append compares the tag in its own hot call) and drops a
pending copy, mirroring onto the tag it read (a compare-and-set).

An untagged append with ``check_tag`` (``expected_tag`` None) onto a filled copy of an
untagged stream (its tag ``UNTAGGED``) was refused by the hot tier and the copy
dropped: every write after a fill dropped it, every read after refilled it. Now the
stand-in counts as none. The interleaving is made with events, not timing; SQLite and
Redis hot tiers."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from statekeeper.backends.tiered import TieredBackend
from statekeeper.records import AppendRequest, RewriteRequest
from statekeeper.testing import request as appended

from .test_tiered_fill_rewrite_race import _agent, stores
from .test_tiered_fill_unchecked_copy import _tagged

__all__ = ["stores"]


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "tagged"])
async def test_an_unchecked_mirror_onto_a_pending_copy_serves_no_old_bytes(
    stores: list[TieredBackend], tagged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler, writer, reader = stores
    head, tag = await (_tagged(writer) if tagged else _agent(writer))
    old = (await writer.durable.read("a", 0, 1))[0]
    new = dataclasses.replace(old, payload=b"rekeyed", checksum=b"rekeyed-sum")
    copied, rewritten, checking, appended_ = (asyncio.Event() for _ in range(4))
    real_read = filler.durable.read
    calls = 0

    async def read(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:  # (the check's read, the copy written: held before it)
            checking.set()
            await appended_.wait()
        answer = await real_read(*args, **kw)
        if calls == 2:  # (the copy's read: the rewrite lands before the copy's write)
            copied.set()
            await rewritten.wait()
        return answer

    monkeypatch.setattr(filler.durable, "read", read)
    filling = asyncio.create_task(filler.read("a"))
    await copied.wait()
    await writer.rewrite(RewriteRequest("a", head, tag, (new,)))
    rewritten.set()
    await checking.wait()  # (the copy in the hot tier, under its pending tag)
    nxt = appended("a", head, 1)  # (no check_tag: the tag the writer holds unknown)
    await writer.append(dataclasses.replace(nxt, head_tag=b"tag-5" if tagged else None))
    stored = await reader.durable.read("a")
    assert stored[0].payload == b"rekeyed"
    try:
        assert await reader.read("a") == stored  # was: the old payload of event 1
    finally:
        appended_.set()
        await filling
    monkeypatch.undo()
    assert await reader.read("a") == stored
    assert await filler.read("a") == stored


async def test_an_untagged_checked_append_keeps_a_filled_copy(
    stores: list[TieredBackend],
) -> None:
    """A fill of an untagged stream, then an append comparing its (absent) tag: the
    copy mirrored, still served (was: dropped by the mirror's refusal)."""
    filler, reader, _ = stores
    head, tag = await _agent(filler)
    assert tag is None
    assert await filler.read("a") == await filler.durable.read("a")  # (filled)
    nxt = AppendRequest("a", head, appended("a", head, 1).events, check_tag=True)
    await filler.append(nxt)
    assert await filler.hot.head_tag("a") == (head + 1, None)  # type: ignore[union-attr]
    hits = reader.stats["hot_hits"]
    assert await reader.read("a") == await reader.durable.read("a")
    assert reader.stats["hot_hits"] == hits + 1
    assert filler.stats["fills"] + reader.stats["fills"] == 1
