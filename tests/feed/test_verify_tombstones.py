"""The whole store's ``verify`` checks the feed's tombstone streams.

Before, it passed over them (statekeeper's own streams): a tombstone record that does
not open, or one that is no tombstone, produced no problem while every consumer of the
feed failed on it. Now each is a problem of kind ``"feed"`` naming the stream; a
store whose tombstones are sound verifies clean."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec import ZERO_LINK
from statekeeper.codec.keys import Keyring
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store.feed_deletes import AGENT_DELETED, stream_of

from ..backends._services import fresh_url

KEYRING = Keyring({"k1": bytes(range(32))})


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis", "s3", "tiered"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as made:
        yield made


async def _append(store: StateStore, stream: str, body: object, damaged: bool) -> int:
    """A record sealed as a tombstone's after the stream's head (its bytes altered
    when ``damaged``), appended as a hand edit would; its seq."""
    backend, codec = store.backend, store.codec
    base = await backend.head(stream)
    last = await backend.read(stream, base - 1, base)
    prev = codec.decode(stream, base, last[-1].type, last[-1].timestamp, last[-1].payload,
                        last[-1].checksum)[1].link if base else ZERO_LINK  # fmt: skip
    ts = time.time()
    sealed = codec.encode(stream, base + 1, AGENT_DELETED, ts, body, prev)
    raw = RawEvent(base + 1, AGENT_DELETED, ts, sealed.payload, sealed.checksum)
    if damaged:
        payload = bytearray(raw.payload)
        payload[-1] ^= 1
        raw = dataclasses.replace(raw, payload=bytes(payload))
    tag = codec.head_tag(stream, base + 1, sealed.link)
    await backend.append(AppendRequest(stream, base, [raw], head_tag=tag))
    return base + 1


async def test_verify_names_a_tombstone_record_that_does_not_open(url: str) -> None:
    async with StateStore(url, keyring=KEYRING) as store:
        for agent_id in ("a1", "a2", "a3"):
            await store.save(agent_id, {"n": 1})
        assert await store.delete("a1")
        assert await store.delete("a2")
        assert (await store.verify()).ok  # sound tombstones: no problem
        stream = stream_of(store.backend, "a3")
        forged = await _append(store, stream, {"note": "no agent"}, damaged=False)
        damaged = await _append(store, stream, {"agent_id": "a3", "head": 1}, damaged=True)
        problems = [(p.agent_id, p.seq, p.kind) for p in (await store.verify()).problems]
        assert (stream, forged, "feed") in problems  # (none, before)
        assert (stream, damaged, "feed") in problems
        assert {p[0] for p in problems} == {stream}
