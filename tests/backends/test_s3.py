"""The S3 backend against a real S3 HTTP endpoint: moto's standalone server on loopback.

The test session starts ``python -m moto.server`` on a free port (never an in-process
mock of the client); every test uses its own bucket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from statekeeper.backends import open_backend
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import BackendUnavailable, ConfigurationError, ConflictError, NotAStore
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.store import StateStore
from statekeeper.testing import BackendConformance, request

from ..store.test_stale_snapshot import leftover_at_head, leftover_served
from ._services import moto_endpoint, namespace, s3_credentials

pytestmark = pytest.mark.slow  # every test goes through a moto S3 server over HTTP


def _bucket_name(tmp_path: Path) -> str:
    return namespace(tmp_path, "sk-t-")


def _client() -> object:
    return boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())


def _drop_bucket(name: str) -> None:
    s3: object = _client()
    try:
        keys = [
            o["Key"]
            for p in s3.get_paginator("list_objects_v2").paginate(Bucket=name)  # type: ignore[attr-defined]
            for o in p.get("Contents", ())
        ]
        for i in range(0, len(keys), 1000):
            s3.delete_objects(  # type: ignore[attr-defined]
                Bucket=name, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]}
            )
        s3.delete_bucket(Bucket=name)  # type: ignore[attr-defined]
    except ClientError:
        pass


def make_s3(tmp_path: Path, prefix: str = "agents") -> S3Backend:
    return S3Backend(
        _bucket_name(tmp_path),
        prefix,
        endpoint_url=moto_endpoint(),
        create_bucket=True,
        **s3_credentials(),
    )


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[str]:
    moto_endpoint()  # skips (or fails in CI) when moto's server cannot start
    name = _bucket_name(tmp_path)
    yield name
    _drop_bucket(name)


class TestS3Conformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _isolated_bucket(self, bucket: str) -> None:
        """Start moto's server (once) and give the test its own bucket."""

    async def make_backend(self, tmp_path: Path) -> S3Backend:
        return make_s3(tmp_path)

    async def open_peer(self, tmp_path: Path) -> S3Backend:
        return make_s3(tmp_path)

    async def open_readonly(self, tmp_path: Path) -> S3Backend:
        # create_bucket=True too: read-only must ignore it
        return S3Backend(
            _bucket_name(tmp_path),
            "agents",
            endpoint_url=moto_endpoint(),
            create_bucket=True,
            readonly=True,
            **s3_credentials(),
        )


# -- S3 only ------------------------------------------------------------------------------


def test_the_server_honours_conditional_writes(bucket: str) -> None:
    """What compare-and-append rests on: If-None-Match='*' refuses an existing key."""
    s3: object = _client()
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    s3.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")  # type: ignore[attr-defined]
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")  # type: ignore[attr-defined]
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"  # type: ignore[attr-defined]


async def test_objects_are_immutable_commits(bucket: str, tmp_path: Path) -> None:
    backend = make_s3(tmp_path, prefix="p/q")
    try:
        await backend.append(request("agent/1", 0, 3, key="k", snap_at=2))
        await backend.append(request("agent/1", 3))
        s3: object = _client()
        keys = sorted(
            o["Key"]
            for o in s3.list_objects_v2(Bucket=bucket)["Contents"]  # type: ignore[attr-defined]
        )
        hexid = b"agent/1".hex()
        assert keys == sorted(
            [
                f"p/q/a/{hexid}/e/{1:020d}",
                f"p/q/a/{hexid}/e/{4:020d}",
                f"p/q/a/{hexid}/h/mark",  # (the high-water mark: incarnation, head)
                f"p/q/a/{hexid}/s/{2:020d}",
                f"p/q/a/{hexid}/k/" + S3Backend._key_hash("k"),
            ]
        )
    finally:
        await backend.close()


async def test_a_writer_behind_the_head_cannot_overwrite(bucket: str, tmp_path: Path) -> None:
    """Two backends (two processes' worth) race through the conditional write."""
    a, b = make_s3(tmp_path), make_s3(tmp_path)
    try:
        await a.append(request("x", 0, 2))
        mine = AppendRequest("x", 2, (RawEvent(3, "patch", 3.0, b"A", b"c"),))
        theirs = AppendRequest("x", 2, (RawEvent(3, "patch", 3.0, b"B", b"c"),))
        results = await asyncio.gather(a.append(mine), b.append(theirs), return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["AppendResult", "ConflictError"]
        winner = b"A" if isinstance(results[0], AppendResult) else b"B"
        assert [e.payload for e in await a.read("x", 2)] == [winner]
        # a stale writer pointing into the middle of a commit is refused too
        with pytest.raises(ConflictError):
            await b.append(AppendRequest("x", 1, (RawEvent(2, "patch", 2.0, b"Z", b"c"),)))
    finally:
        await a.close()
        await b.close()


async def test_a_key_on_a_commit_whose_key_object_was_lost_is_still_found(
    bucket: str, tmp_path: Path
) -> None:
    """A crash between the commit and its key object: the retry is still a duplicate."""
    backend = make_s3(tmp_path)
    try:
        await backend.append(request("a", 0, 2, key="step"))
        s3: object = _client()
        s3.delete_object(  # type: ignore[attr-defined]
            Bucket=bucket,
            Key=f"agents/a/{b'a'.hex()}/k/" + S3Backend._key_hash("step"),
        )
        assert await backend.append(request("a", 0, 2, key="step")) == AppendResult("a", 1, 2, True)
        # the next append restores the key object, so it survives later commits
        await backend.append(request("a", 2, key="next"))
        await backend.append(request("a", 3))
        assert await backend.lookup_key("a", "step") == AppendResult("a", 1, 2, True)
    finally:
        await backend.close()


async def test_url_selects_the_endpoint(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_credentials().items():
        monkeypatch.setenv(name.upper() if name != "region_name" else "AWS_DEFAULT_REGION", value)
    backend = open_backend(f"s3://{bucket}/tenant?endpoint_url={moto_endpoint()}&create_bucket=1")
    assert isinstance(backend, S3Backend)
    try:
        assert backend.prefix == "tenant" and backend.endpoint_url == moto_endpoint()
        await backend.append(request("a", 0))
        assert (await backend.health()).ok
    finally:
        await backend.close()
    with pytest.raises(ConfigurationError):
        open_backend("s3://b/p?colour=blue")
    with pytest.raises(ConfigurationError):
        open_backend("s3:///nobucket")


async def test_store_on_s3(bucket: str, tmp_path: Path) -> None:
    async with StateStore(make_s3(tmp_path), snapshot_every=4, durability="group") as store:
        await asyncio.gather(*(store.save(f"a{i}", {"i": i}) for i in range(8)))
        for step in range(6):
            await store.save("a0", {"i": 0, "step": step})
        assert (await store.load("a0")).data == {"i": 0, "step": 5}
        assert await store.count_agents() == 8
        assert (await store.verify()).ok


async def test_a_deleted_streams_late_snapshot_is_never_served(bucket: str, tmp_path: Path) -> None:
    """A snapshot object written after a delete listed the agent's objects (an append's
    snapshot write follows its commit) survives the delete; once the agent is
    re-created, loads at its seq fold the new stream's events instead of serving it."""
    await leftover_served(make_s3(tmp_path))
    await leftover_at_head(make_s3(tmp_path, "other"))


async def test_readonly_never_creates_the_bucket(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only ignores ``create_bucket``: a missing bucket, and an existing bucket's
    empty prefix, are NotAStore, and no bucket or object is created by trying."""
    for name, value in s3_credentials().items():
        monkeypatch.setenv(name.upper() if name != "region_name" else "AWS_DEFAULT_REGION", value)
    url = f"s3://{bucket}/agents?endpoint_url={moto_endpoint()}&create_bucket=1"
    ro = open_backend(url, readonly=True)
    assert isinstance(ro, S3Backend)
    try:
        with pytest.raises(NotAStore, match=f"s3://{bucket}/agents"):
            await ro.ensure_store()
    finally:
        await ro.close()
    s3: object = _client()
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    ro = open_backend(url, readonly=True)
    try:
        with pytest.raises(NotAStore):
            await ro.ensure_store()
        assert await ro.list_agents() == []
    finally:
        await ro.close()
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # type: ignore[attr-defined]


async def test_a_missing_bucket_or_endpoint_is_named_at_the_first_use(bucket: str) -> None:
    """A bucket that does not exist (and no ``create_bucket``) or an endpoint nobody
    answers is ``BackendUnavailable`` naming what to fix — not a ``BackendError`` with
    botocore's "(404) when calling the HeadBucket operation: Not Found" — and nothing
    is created."""
    missing = S3Backend(bucket, "agents", endpoint_url=moto_endpoint(), **s3_credentials())
    try:
        with pytest.raises(BackendUnavailable) as info:
            await missing.append(request("a", 0))
        assert f"bucket {bucket!r} does not exist" in str(info.value)
        assert "create_bucket=1" in str(info.value)
        with pytest.raises(BackendUnavailable, match="does not exist"):
            await missing.list_agents()
    finally:
        await missing.close()
    with pytest.raises(ClientError):
        _client().head_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    nobody = S3Backend(bucket, "agents", endpoint_url="http://127.0.0.1:9", **s3_credentials())
    try:
        with pytest.raises(BackendUnavailable, match="cannot connect to the S3 endpoint"):
            await nobody.head("a")
    finally:
        await nobody.close()
