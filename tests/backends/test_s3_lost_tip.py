"""An agent's NEWEST S3 commit object deleted by something other than the store (a
lifecycle rule, another tool, an operator): before, its head silently went back to the
commit before and the next save reused the lost seq (an acknowledged write gone, its
seq naming other data). Now every read of the head raises IntegrityError naming the
agent and the lost seqs: the stream's incarnation (a random id of the stream, in each
commit's, snapshot's and key object's metadata) and its high-water mark (``h/mark``,
written after each commit) say how far this stream got; a mark or snapshot of a
deleted earlier incarnation (a late write of its last append) is not evidence. A
stream written before incarnations keeps the old behaviour until its next append.
(A deleted commit in the middle: tests/backends/test_s3_lost_objects.py.)"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import IntegrityError
from statekeeper.records import AppendResult
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


def _keys(bucket: str, under: str = ROOT) -> list[str]:
    page = _client().list_objects_v2(Bucket=bucket, Prefix=under)
    return [o["Key"] for o in page.get("Contents", ())]


async def test_a_deleted_newest_commit_is_an_error_and_its_seq_is_not_reused(
    bucket: str,
) -> None:
    async with StateStore(_backend(bucket)) as store:
        for n in range(1, 4):
            await store.save("x", {"n": n})
    lost = f"{ROOT}e/{3:020d}"
    _client().delete_object(Bucket=bucket, Key=lost)
    async with StateStore(_backend(bucket)) as store:
        # was: the state of seq 2, then save -> seq 3 again, with {"n": 99}
        with pytest.raises(IntegrityError, match=r"events 3\.\.3 are missing") as info:
            await store.load("x")
        assert info.value.agent_id == "x" and info.value.seq == 3
        with pytest.raises(IntegrityError, match=r"reuse seq 3"):
            await store.save("x", {"n": 99})
        with pytest.raises(IntegrityError):
            await store.backend.head("x")
    assert lost not in _keys(bucket), "the lost seq was written again"


async def test_a_snapshot_of_the_stream_above_its_head_is_evidence_too(bucket: str) -> None:
    """The mark deleted with the commit (or never written: a process died before it):
    a snapshot of the same incarnation above the head still proves the loss."""
    backend = _backend(bucket)
    try:
        await backend.append(request("x", 0, 2))
        await backend.append(request("x", 2, 2, snap_at=4))
        client = _client()
        client.delete_objects(
            Bucket=bucket,
            Delete={"Objects": [{"Key": f"{ROOT}e/{3:020d}"}, {"Key": f"{ROOT}h/mark"}]},
        )
        with pytest.raises(IntegrityError, match=r"events 3\.\.4 are missing \(its snapshot"):
            await backend.head("x")
        with pytest.raises(IntegrityError):
            await backend.append(request("x", 2, 1))
        assert f"{ROOT}e/{3:020d}" not in _keys(bucket)
    finally:
        await backend.close()


async def test_a_deleted_incarnations_late_mark_and_snapshot_are_not_evidence(
    bucket: str,
) -> None:
    """A delete's late leftovers (the last append of the deleted stream wrote its mark
    and snapshot after the delete's erase) stand above the new stream's head: they are
    another incarnation's, so the new stream reads and appends as it is."""
    backend = _backend(bucket)
    client = _client()
    try:
        await backend.append(request("x", 0, 5, snap_at=5))
        late = {
            key: client.get_object(Bucket=bucket, Key=key)
            for key in (f"{ROOT}h/mark", f"{ROOT}s/{5:020d}")
        }
        assert await backend.delete_agent("x")
        await backend.append(request("x", 0, 2))
        for key, obj in late.items():  # written back, as the late writes would
            client.put_object(
                Bucket=bucket, Key=key, Body=obj["Body"].read(), Metadata=obj["Metadata"]
            )
        # (the mark is the old incarnation's: the snapshots above the head are listed,
        # and the one there is the old incarnation's too)
        assert await backend.head("x") == 2
        await backend.append(request("x", 2, 1))
        assert [e.seq for e in await backend.read("x")] == [1, 2, 3]
        assert await backend.head("x") == 3
    finally:
        await backend.close()


async def test_a_stream_written_before_incarnations_works_as_before(bucket: str) -> None:
    """No incarnation in the commits (the old code's store): no check, the old
    behaviour; its next append gives the stream one, and from then on a lost newest
    commit is told."""
    backend = _backend(bucket)
    client = _client()
    try:
        for n in range(3):
            await backend.append(request("x", n, 1))
        for key in _keys(bucket):  # as the old code wrote them: no incarnation, no mark
            if "/h/" in key:
                client.delete_object(Bucket=bucket, Key=key)
                continue
            meta = client.head_object(Bucket=bucket, Key=key)["Metadata"]
            meta.pop("inc", None)
            client.copy_object(
                Bucket=bucket,
                Key=key,
                CopySource={"Bucket": bucket, "Key": key},
                Metadata=meta,
                MetadataDirective="REPLACE",
            )
        assert await backend.head("x") == 3
        client.delete_object(Bucket=bucket, Key=f"{ROOT}e/{3:020d}")
        assert await backend.head("x") == 2  # (undetected: nothing says it got further)
        await backend.append(request("x", 2, 1))
        await backend.append(request("x", 3, 1))
        client.delete_object(Bucket=bucket, Key=f"{ROOT}e/{4:020d}")
        with pytest.raises(IntegrityError, match=r"events 4\.\.4 are missing"):
            await backend.head("x")
    finally:
        await backend.close()


async def test_a_stream_that_lost_its_newest_commit_can_be_deleted(bucket: str) -> None:
    backend = _backend(bucket)
    try:
        await backend.append(request("x", 0, 1))
        await backend.append(request("x", 1, 1))
        _client().delete_object(Bucket=bucket, Key=f"{ROOT}e/{2:020d}")
        assert await backend.delete_agent("x")
        assert _keys(bucket) == []
        await backend.append(request("x", 0, 1))  # a new incarnation
        assert await backend.head("x") == 1
    finally:
        await backend.close()


async def test_a_commit_landing_while_the_head_is_read_is_no_loss(bucket: str) -> None:
    """Another writer's commit and mark between this reader's listing and its read of
    the mark: the mark is above what was listed, and the stream, read again after the
    mark, reaches it: no error."""
    reader, writer = _backend(bucket), _backend(bucket)
    try:
        await reader.append(request("x", 0, 1))
        assert await writer.head("x") == 1  # (the writer's client is ready)
        reached = reader._reached
        landed: list[int] = []

        def commit_first(agent_id: str, inc: str, head: int) -> tuple[int, str]:
            if not landed:  # after the reader's listing, before its read of the mark
                landed.append(writer._append_sync(request("x", 1, 2)).last_seq)
            return reached(agent_id, inc, head)

        reader._reached = commit_first  # type: ignore[method-assign]
        assert await reader.head("x") == 3
        assert landed == [3]
    finally:
        await reader.close()
        await writer.close()


async def test_a_retry_of_a_lost_append_is_not_answered_as_stored(bucket: str) -> None:
    """The key object outlives the deleted commit: a retry of that save was answered
    "duplicate" (stored at seq 2) although its events were gone."""
    backend = _backend(bucket)
    try:
        await backend.append(request("x", 0, 1))
        await backend.append(request("x", 1, 1, key="k"))
        _client().delete_object(Bucket=bucket, Key=f"{ROOT}e/{2:020d}")
        with pytest.raises(IntegrityError, match=r"events 2\.\.2 are missing"):
            await backend.append(request("x", 1, 1, key="k"))
    finally:
        await backend.close()


async def test_a_deleted_incarnations_late_key_is_not_a_duplicate(bucket: str) -> None:
    """A key object a deleted stream's last append wrote after the delete's erase: a
    save of the new stream with that key was answered "duplicate" (the old stream's
    seqs) and dropped; now it is stored, its key object written over."""
    backend = _backend(bucket)
    client = _client()
    try:
        await backend.append(request("x", 0, 3, key="k"))
        name = f"{ROOT}k/" + S3Backend._key_hash("k")
        late = client.get_object(Bucket=bucket, Key=name)
        assert await backend.delete_agent("x")
        await backend.append(request("x", 0, 1))
        client.put_object(
            Bucket=bucket, Key=name, Body=late["Body"].read(), Metadata=late["Metadata"]
        )
        result = await backend.append(request("x", 1, 1, key="k"))
        assert (result.first_seq, result.last_seq, result.duplicate) == (2, 2, False)
        assert await backend.lookup_key("x", "k") == AppendResult("x", 2, 2, duplicate=True)
        assert [e.seq for e in await backend.read("x")] == [1, 2]
    finally:
        await backend.close()
