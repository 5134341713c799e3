"""A caller cancelled while ``StatekeeperSaver.aclose()`` waited for the claims'
renewal task to end had its cancellation swallowed — the wait was ``with
suppress(CancelledError): await task`` — so ``aclose()`` went on (closed the store)
and returned as if never cancelled. The renewal's own cancellation is still absorbed;
the caller's is raised (as ``lease_grants.ended`` does for a lease's heartbeat)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import backend_url


async def _slow_renewal(finish: asyncio.Event, entered: asyncio.Event) -> None:
    """A renewal that, cancelled, still waits for ``finish`` before it ends (a driver
    finishing its I/O before it honours the cancel)."""
    entered.set()
    try:
        await finish.wait()
    except asyncio.CancelledError:
        await finish.wait()
        raise


async def test_a_cancelled_aclose_raises_the_cancellation(tmp_path: Path) -> None:
    saver = await StatekeeperSaver.afrom_url(backend_url("sqlite", tmp_path))
    store = saver.store
    entered, finish = asyncio.Event(), asyncio.Event()
    saver._renewing = asyncio.ensure_future(_slow_renewal(finish, entered))
    await entered.wait()
    closing = asyncio.ensure_future(saver.aclose())
    for _ in range(1000):  # bounded: aclose now waits for the renewal's end
        if saver._renewing is None:
            break
        await asyncio.sleep(0)
    assert saver._renewing is None and not closing.done()
    closing.cancel()
    finish.set()
    with pytest.raises(asyncio.CancelledError):  # (was: returned)
        await closing
    assert not store._closed  # nothing done after the cancellation
    await store.close()


async def test_an_uncancelled_aclose_absorbs_the_renewals_cancellation(tmp_path: Path) -> None:
    saver = await StatekeeperSaver.afrom_url(backend_url("sqlite", tmp_path))
    store = saver.store
    entered, finish = asyncio.Event(), asyncio.Event()
    saver._renewing = asyncio.ensure_future(_slow_renewal(finish, entered))
    await entered.wait()
    closing = asyncio.ensure_future(saver.aclose())
    for _ in range(1000):
        if saver._renewing is None:
            break
        await asyncio.sleep(0)
    finish.set()
    await closing  # returns: the renewal's cancellation is its own
    assert store._closed
