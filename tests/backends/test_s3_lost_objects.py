"""An S3 commit object deleted by something other than the store (a lifecycle rule,
another tool): reads raise IntegrityError instead of a shorter stream."""

from __future__ import annotations

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import IntegrityError
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_a_commit_deleted_under_the_store_is_a_gap_not_a_shorter_stream(
    bucket: str,
) -> None:
    store = S3Backend(
        bucket, "p", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    try:
        await store.append(request("x", 0, 1))
        await store.append(request("x", 1, 2))
        await store.append(request("x", 3, 1))
        assert [e.seq for e in await store.read("x")] == [1, 2, 3, 4]
        s3 = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
        s3.delete_object(Bucket=bucket, Key=f"p/a/{b'x'.hex()}/e/{2:020d}")
        # was: [1, 4], events 2 and 3 skipped without a word
        with pytest.raises(IntegrityError, match=r"events 2\.\.3 are missing") as info:
            await store.read("x")
        assert info.value.seq == 2
        with pytest.raises(IntegrityError):
            await store.read("x", after_seq=1, limit=1)
        # what lies wholly after the gap still reads
        assert [e.seq for e in await store.read("x", after_seq=3)] == [4]
    finally:
        await store.close()
