"""``Backend.delete_agent_at(id, head, checksum)``: the delete is conditional on the head
event's stored checksum (the head record's identity) as well as its seq, so an agent
deleted and written again up to the same head by another process — a new stream, its
writes acknowledged — is never deleted by a delete that looked at the old one. The
conformance case (``statekeeper.testing.lifecycle``) runs on every engine; these are
what it cannot reach: S3's window between its identity read and its claim (no
transaction over two objects), and the instrumented wrapper's forwarding."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.errors import ConflictError
from statekeeper.observability import instrument

from ._services import fresh_url


def before_the_claim(backend: Any, write: Callable[[], Awaitable[Any]]) -> None:
    """Run ``write`` once, just before ``backend`` (S3) claims a stream to delete it —
    after it read the head record it is conditional on — from its worker thread."""
    loop = asyncio.get_running_loop()
    real = backend._claim
    armed = [True]

    def hooked(*args: Any) -> Any:
        if armed[0]:
            armed[0] = False
            asyncio.run_coroutine_threadsafe(write(), loop).result()
        return real(*args)

    backend._claim = hooked


async def _head_checksum(store: StateStore, agent_id: str) -> bytes:
    head = await store.backend.head(agent_id)
    return (await store.backend.read(agent_id, head - 1, head))[0].checksum


@pytest.mark.slow
async def test_s3_a_stream_made_again_before_the_claim_is_not_deleted(tmp_path: Path) -> None:
    """The claim of the commit slot after the head is conditional on that slot only:
    it lands on a stream made again up to the same head as well. The claim names the
    incarnation it was made for; the delete looks under it once it won, finds another
    one, withdraws it and deletes nothing (ConflictError). Appends go on after."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"old": 0})
            await store.save("a", {"old": 1})
            old = await _head_checksum(store, "a")

            async def made_again() -> None:  # another process on the same bucket
                assert await other.delete("a")
                await other.save("a", {"new": 0})
                await other.save("a", {"new": 1})

            before_the_claim(store.backend, made_again)
            with pytest.raises(ConflictError) as caught:
                await store.backend.delete_agent_at("a", 2, old)
            assert (caught.value.expected_seq, caught.value.current_seq) == (2, 2)
            assert (await other.load("a")).data == {"new": 1}  # acknowledged, kept
            await other.save("a", {"new": 2})  # the claim withdrawn: the slot is free
            assert (await store.load("a")).data == {"new": 2}
            assert await store.backend.delete_agent_at("a", 3, await _head_checksum(store, "a"))
            assert await other.backend.head("a") == 0


@pytest.mark.slow
async def test_s3_a_claim_left_over_another_stream_is_not_that_streams(tmp_path: Path) -> None:
    """A delete that died after its claim landed on a stream made again (before it
    could withdraw it) leaves that claim behind. It is not the new stream's: the stream
    reads as before (its own head and head tag, not the claim's: the old stream's),
    an append withdraws the claim and lands (before: it finished the claim's delete,
    the new stream gone), and a delete naming the old head record deletes nothing."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"old": 0})
            old = await _head_checksum(store, "a")
            backend: Any = store.backend
            _, meta = backend._tip_layout("a")
            assert await other.delete("a")
            await other.save("a", {"new": 0})
            assert backend._claim("a", 1, meta)  # the old incarnation's claim, left there
            assert (await other.load("a")).data == {"new": 0}
            with pytest.raises(ConflictError):  # a delete of the old one: nothing deleted
                await backend.delete_agent_at("a", 1, old)
            await other.save("a", {"new": 1})
            assert (await store.load("a")).data == {"new": 1}
            assert backend._claim("a", 2, backend._tip_layout("a")[1] | {"inc": "another"})
            assert await store.delete("a")  # a plain delete: the claim holds appends off
            assert await other.backend.head("a") == 0


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_the_instrumented_backend_forwards_the_checksum(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            instrument(store, registry=CollectorRegistry(), tracing=False)
            await store.save("a", {"i": 0})
            head = await _head_checksum(store, "a")
            with pytest.raises(ConflictError):
                await store.backend.delete_agent_at("a", 1, b"another record")
            assert await store.head("a") == 1
            assert await store.backend.delete_agent_at("a", 1, head)
            assert await store.head("a") == 0
