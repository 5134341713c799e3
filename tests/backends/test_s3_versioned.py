"""On a bucket with versioning (enabled, suspended, or an object lock, which turns it
on), a plain delete only adds a delete marker: every byte stays as an older version.
An erase (delete_agent, drop_all, prune, expire_keys) deletes every version of each
key, and a version S3 keeps (object lock) is an error, not a success."""

from __future__ import annotations

import contextlib
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest

pytest.importorskip("boto3")

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import BackendError
from statekeeper.security import Keyring, generate_key, rekey
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


async def test_an_interrupted_erase_never_brings_back_an_older_version(bucket: str) -> None:
    """A key with older versions (an overwrite's: a rekey or migration by an earlier
    release, another tool): deleting its current version first makes the next older
    one current, so an erase cut short there served the replaced bytes (a record from
    before a rekey, in clear) as the agent's. The older versions go first, the current
    one last: cut anywhere, each key is as it was or gone."""
    s3 = _client()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store = _store(bucket)
    root = f"p/a/{b'x'.hex()}/"
    try:
        await store.append(request("x", 0, 2, key="k"))
        await store.append(request("x", 2, 1))
        for key in _versions(s3, bucket, root):  # an older version under each
            obj = s3.get_object(Bucket=bucket, Key=key)
            body, meta = obj["Body"].read(), obj["Metadata"]
            s3.put_object(Bucket=bucket, Key=key, Body=b"replaced bytes")
            s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta)
        page = s3.list_object_versions(Bucket=bucket, Prefix=root)
        was = {v["Key"]: v["VersionId"] for v in page["Versions"] if v["IsLatest"]}
        done: list[dict[str, str]] = []
        real = S3Backend._delete_objects

        def cut_short(self: S3Backend, objects: Any) -> None:
            for o in objects:  # (one at a time, stopped after `cut`)
                if len(done) == cut:
                    raise BackendError("cut short", maybe_applied=True)
                real(self, [o])
                done.append(o)

        served: list[str] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(S3Backend, "_delete_objects", cut_short)
            for cut in range(1, 40):
                done.clear()
                with contextlib.suppress(BackendError):
                    await store.delete_agent("x")
                page = s3.list_object_versions(Bucket=bucket, Prefix=root)
                served += [  # (the delete's own claim, a commit after the head, is new)
                    v["Key"]
                    for v in page.get("Versions", [])
                    if v["IsLatest"] and v["Key"] in was and v["VersionId"] != was[v["Key"]]
                ]
                if not done or len(done) < cut:
                    break
        assert served == []  # was: each key's replaced bytes current after a cut
        assert await store.head("x") == 0
    finally:
        await store.close()
        _purge(s3, bucket)


async def test_rekey_leaves_no_record_in_clear_as_an_older_version(bucket: str) -> None:
    """``rekey`` rewrites each commit and snapshot in place: on a versioned bucket the
    overwrite kept the clear bytes as an older version (readable by anyone allowed to
    list versions), so a store encrypted the documented way kept every record in clear
    for ever. Each overwritten key keeps its current version only."""
    s3 = _client()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    backend = _store(bucket)
    try:
        plain = StateStore(backend, snapshot_every=2)
        for n in range(5):
            await plain.save("a", {"secret": "s3cr3t-value", "n": n})
        await plain.append("a", "charge", {"n": 1}, idempotency_key="charge-42")
        assert await rekey(StateStore(backend, keyring=Keyring({"k1": generate_key()})))
        page = s3.list_object_versions(Bucket=bucket, Prefix="p/a/")
        older = [  # (the high-water mark's older versions are empty: each save's)
            v["Key"]
            for v in page.get("Versions", [])
            if not v["IsLatest"] and not v["Key"].endswith("/h/mark")
        ]
        assert older == []  # was: every commit and snapshot rewritten, in clear
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
            assert b"s3cr3t-value" not in (data := body["Body"].read())
            assert b"charge-42" not in data  # (the idempotency record's name)
    finally:
        await backend.close()
        _purge(s3, bucket)
