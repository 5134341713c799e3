"""A key object a deleted stream's last append wrote after the delete's erase (a late
write: h/s3incarn marks it with that stream's incarnation) is not the new stream's:
``append`` already passed over it, but ``lookup_key`` answered it as the new stream's
record ("duplicate", the old stream's seqs) and ``idempotency_keys`` listed it. The
store asks ``lookup_key`` before a conflict and in write-behind mode: a save of the new
stream with that key then failed its record check (IntegrityError, "forged or damaged"
instead of the ConflictError), and ``verify`` reported the healthy new stream as
damaged (it checks each record ``idempotency_keys`` lists)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper.backends.s3 import S3Backend
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP

ROOT = f"p/a/{b'x'.hex()}/"


def _backend(bucket: str) -> S3Backend:
    return S3Backend(
        bucket, "p", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )


def _client() -> Any:
    return boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())


@pytest.mark.parametrize("made_again", [True, False])
async def test_a_deleted_incarnations_late_key_is_not_found(bucket: str, made_again: bool) -> None:
    backend = _backend(bucket)
    client = _client()
    try:
        await backend.append(request("x", 0, 3, key="k"))
        await backend.append(request("x", 3, 1, key="j"))  # (k's record: its own object)
        name = f"{ROOT}k/" + S3Backend._key_hash("k")
        late = client.get_object(Bucket=bucket, Key=name)
        assert await backend.delete_agent("x")
        if made_again:
            await backend.append(request("x", 0, 1))
        client.put_object(  # written back, as the late write would
            Bucket=bucket, Key=name, Body=late["Body"].read(), Metadata=late["Metadata"]
        )
        assert await backend.lookup_key("x", "k") is None
        assert await backend.idempotency_keys("x") == []
    finally:
        await backend.close()


async def test_the_streams_own_keys_are_still_found(bucket: str) -> None:
    backend = _backend(bucket)
    try:
        await backend.append(request("x", 0, 3, key="k"))
        await backend.append(request("x", 3, 1, key="j"))
        found = await backend.lookup_key("x", "k")
        assert found is not None and (found.first_seq, found.last_seq) == (1, 3)
        assert [k for k, _, _ in await backend.idempotency_keys("x")] == ["k", "j"]
    finally:
        await backend.close()


async def test_a_store_save_with_that_key_is_not_refused_as_forged(bucket: str) -> None:
    """The store asks ``lookup_key`` when a keyed save meets a conflict (a retry of an
    append that landed?): the stale record made it an IntegrityError ("forged or
    damaged idempotency record") instead of the ConflictError the save had."""
    from statekeeper import StateStore
    from statekeeper.errors import ConflictError

    client = _client()
    async with StateStore(_backend(bucket)) as store:
        await store.save("x", {"n": 1}, idempotency_key="k")
        await store.save("x", {"n": 2}, idempotency_key="j")
        name = f"{ROOT}k/" + S3Backend._key_hash("k")
        late = client.get_object(Bucket=bucket, Key=name)
        await store.delete("x")
        await store.save("x", {"new": 1})
        await store.save("x", {"new": 2})
        client.put_object(
            Bucket=bucket, Key=name, Body=late["Body"].read(), Metadata=late["Metadata"]
        )
        with pytest.raises(ConflictError):
            await store.save("x", {"new": 3}, idempotency_key="k", expected_seq=1)


async def test_verify_does_not_report_the_late_key(bucket: str) -> None:
    """``verify`` checks each record ``idempotency_keys`` lists against its events: the
    stale record was reported as a problem of the new stream."""
    from statekeeper import StateStore

    client = _client()
    async with StateStore(_backend(bucket)) as store:
        await store.save("x", {"n": 1}, idempotency_key="k")
        await store.save("x", {"n": 2}, idempotency_key="j")
        name = f"{ROOT}k/" + S3Backend._key_hash("k")
        late = client.get_object(Bucket=bucket, Key=name)
        await store.delete("x")
        await store.save("x", {"new": 1})
        client.put_object(
            Bucket=bucket, Key=name, Body=late["Body"].read(), Metadata=late["Metadata"]
        )
        report = await store.verify(["x"])
        assert report.ok, report.problems
