"""On a bucket with versioning (enabled, suspended, or an object lock, which turns it
on), a plain delete only adds a delete marker: every byte stays as an older version.
An erase (delete_agent, drop_all, prune, expire_keys) deletes every version of each
key, and a version S3 keeps (object lock) is an error, not a success."""

from __future__ import annotations

from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import BackendError
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


def _client() -> Any:
    return boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())


def _store(bucket: str) -> S3Backend:
    return S3Backend(bucket, "p", endpoint_url=moto_endpoint(), **s3_credentials())


def _versions(s3: Any, bucket: str, prefix: str) -> list[str]:
    """Every version and delete marker left under ``prefix``."""
    page = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
    return [v["Key"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]


def _purge(s3: Any, bucket: str) -> None:
    page = s3.list_object_versions(Bucket=bucket)
    for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
        s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])


@pytest.mark.parametrize("status", ["Enabled", "Suspended"])
async def test_deleting_an_agent_leaves_no_version_of_its_objects(bucket: str, status: str) -> None:
    s3 = _client()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store = _store(bucket)
    try:
        await store.append(request("x", 0, 2, key="k"))
        await store.append(request("x", 2, 1))
        await store.append(request("y", 0, 1))
        if status == "Suspended":  # (the versions written while enabled stay)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        assert await store.delete_agent("x") is True
        assert await store.head("x") == 0
        # was: every object of x still there as a version behind a delete marker
        assert _versions(s3, bucket, f"p/a/{b'x'.hex()}/") == []
        assert await store.head("y") == 1
        assert await store.drop_all() == 1
        assert _versions(s3, bucket, "p/a/") == []
    finally:
        await store.close()
        _purge(s3, bucket)


async def test_an_erase_an_object_lock_refuses_is_an_error(bucket: str) -> None:
    s3 = _client()
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(
        Bucket=bucket,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )
    store = _store(bucket)
    try:
        await store.append(request("x", 0, 2, key="k"))
        # was: True, every version kept behind delete markers
        with pytest.raises(BackendError, match="did not delete") as info:
            await store.delete_agent("x")
        assert info.value.maybe_applied is True
    finally:
        await store.close()
        page = s3.list_object_versions(Bucket=bucket)
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(
                Bucket=bucket,
                Key=v["Key"],
                VersionId=v["VersionId"],
                BypassGovernanceRetention=True,
            )
