"""Agent ids too long for S3's 1,024-byte object keys are refused before anything is
written, naming the id's length and the store's limit.

Was (a trial on real AWS): an id of ~476–495 bytes *created* the agent (its commit key
fit), then every keyed save failed with a raw ``BackendError KeyTooLongError`` (the
idempotency key object, ``<prefix>/a/<hex id>/k/<sha256>``, is the longest key). moto
takes longer keys, so these tests check the keys the backend writes against the limit
themselves: the longest id it accepts writes no key over 1,024 bytes, one byte more is
refused.
"""

from __future__ import annotations

import pytest

pytest.importorskip("boto3")

from statekeeper import StateStore
from statekeeper.arguments import MAX_ID_BYTES
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.s3 import MAX_KEY_BYTES, S3Backend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import InvalidAgentId
from statekeeper.records import AppendResult
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import _client
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


def _store(bucket: str, prefix: str) -> S3Backend:
    return S3Backend(
        bucket, prefix, endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )


def _keys(bucket: str) -> list[str]:
    s3: object = _client()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)  # type: ignore[attr-defined]
    return [o["Key"] for p in pages for o in p.get("Contents", ())]


@pytest.mark.parametrize("prefix", ["", "agents", "tenant/\u00fcber-" + "p" * 100])
def test_the_longest_accepted_id_has_no_key_over_the_limit(prefix: str) -> None:
    backend = S3Backend("b", prefix, **s3_credentials())
    limit = backend.max_id_bytes
    assert 0 < limit < MAX_ID_BYTES
    for longest in ("x" * limit, "\u00e9" * (limit // 2), "\U0001f642" * (limit // 4)):
        keys = backend.agent_keys(longest)
        assert max(len(k.encode()) for k in keys) <= MAX_KEY_BYTES
        assert backend.longest_key(longest).encode() == max((k.encode() for k in keys), key=len)
    # the limit is tight: one byte more and the longest key is over
    assert len(backend.longest_key("x" * (limit + 1)).encode()) > MAX_KEY_BYTES


async def test_every_object_the_longest_id_writes_fits(bucket: str) -> None:
    """Commits, a snapshot, a key object, the mark, a compacted stream's base, a
    delete's claim: every key written for the longest id is at most 1,024 bytes."""
    backend = _store(bucket, "agents")
    longest = "x" * backend.max_id_bytes
    try:
        await backend.append(request(longest, 0, 3, key="k" * MAX_ID_BYTES, snap_at=2))
        await backend.append(request(longest, 3, 2, key="next", snap_at=5))
        await backend.prune(longest, 2)
        written = set(_keys(bucket))
        await backend.delete_agent(longest)
    finally:
        await backend.close()
    assert {k.rsplit("/", 2)[1] for k in written if "/a/" in k} == {"e", "s", "k", "h"}
    assert any("/e/b" in k for k in written)  # (the compacted stream's base)
    assert max(len(k.encode()) for k in written) <= MAX_KEY_BYTES


@pytest.mark.parametrize("over", [1, 20, 500])
async def test_a_longer_id_is_refused_before_anything_is_written(bucket: str, over: int) -> None:
    backend = _store(bucket, "agents")
    limit = backend.max_id_bytes
    too_long = "x" * (limit + over)
    try:
        await backend.initialize()
        before = set(_keys(bucket))
        message = f"{limit + over:,} bytes in UTF-8, over the limit of {limit:,} of this S3 store"
        with pytest.raises(InvalidAgentId, match=message):
            await backend.append(request(too_long, 0, 2, key="k", snap_at=2))
        [refused] = await backend.append_batch([request(too_long, 0)])
        assert isinstance(refused, InvalidAgentId)
        async with StateStore(backend) as store:
            with pytest.raises(InvalidAgentId, match="over the limit"):
                await store.save(too_long, {"step": 1}, idempotency_key="step-1")
        assert set(_keys(bucket)) == before
    finally:
        await backend.close()


async def test_a_tiered_store_refuses_what_its_s3_tier_cannot_hold(bucket: str) -> None:
    """An S3 cold tier: the agent would be written to the durable tier, then its
    demotion fail; an S3 durable tier must hold a demoted agent's marker id too."""
    cold = _store(bucket, "cold")
    durable = MemoryBackend()
    tiered = TieredBackend(durable, cold=cold)
    as_durable = TieredBackend(_store(bucket, "warm"), cold=MemoryBackend())
    try:
        assert tiered.max_id_bytes == cold.max_id_bytes
        assert as_durable.max_id_bytes == cold.max_id_bytes - len(COLD_MARKER)
        too_long = "y" * (cold.max_id_bytes + 1)
        with pytest.raises(InvalidAgentId, match=f"limit of {cold.max_id_bytes:,}"):
            await tiered.append(request(too_long, 0, key="k"))
        refused, made = await tiered.append_batch([request(too_long, 0), request("ok", 0)])
        assert isinstance(refused, InvalidAgentId)
        assert made == AppendResult("ok", 1, 1)
        assert [i.agent_id for i in await durable.list_agents()] == ["ok"]
        longest = "z" * tiered.max_id_bytes
        await tiered.append(request(longest, 0, key="k"))
        assert await tiered.demote(longest) is True
        assert await tiered.head(longest) == 1
    finally:
        await tiered.close()
        await as_durable.close()
