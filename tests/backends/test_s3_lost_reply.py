"""Conditional S3 writes whose reply is lost after the server applied them.

botocore retries a request whose connection closed before the reply came (``standard``
retry mode): the retry of a conditional write then meets the object its first try
wrote — ``If-None-Match: *`` finds it present, ``If-Match`` finds its ETag changed —
and S3 answers 412. That used to be reported as another writer's conflict (an append,
a rewrite: :class:`~statekeeper.errors.ConflictError`; a backup upload: "exists
already") although the object present was the caller's own. Each write now carries a
token of its own in the object's metadata, and a 412 is taken as success when the
object holds that token.

The fault is real HTTP: the first matching request is sent to moto's server through
the client's own HTTP session, its reply dropped, and ``ConnectionClosedError`` raised
in its place, so botocore's own retry sends it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from botocore.exceptions import ConnectionClosedError  # type: ignore[import-untyped]

from statekeeper.backends.s3 import upload_new
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawEvent, RewriteRequest
from statekeeper.testing import request

from ._services import moto_endpoint
from .test_s3 import _bucket_name, _client, _drop_bucket, make_s3

pytestmark = pytest.mark.slow


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[str]:
    moto_endpoint()  # skips (or fails in CI) when moto's server cannot start
    name = _bucket_name(tmp_path)
    yield name
    _drop_bucket(name)


def lose_reply(
    client: Any, operation: str, when: Callable[[Any], bool] = lambda r: True
) -> list[str]:
    """Drop the reply of the first ``operation`` request ``when`` accepts, once the server
    has applied it; returns the URLs of the requests whose reply was lost."""
    lost: list[str] = []

    def send(request: Any, **_: Any) -> None:
        if lost or not when(request):
            return
        client._endpoint.http_session.send(request)  # applied by the server ...
        lost.append(request.url)
        raise ConnectionClosedError(endpoint_url=request.url)  # ... and its reply lost

    client.meta.events.register(f"before-send.s3.{operation}", send)
    return lost


def _is_commit(request: Any) -> bool:
    return "/e/" in request.url and request.headers.get("If-None-Match") == b"*"


async def test_an_append_whose_reply_was_lost_is_done_not_a_conflict(
    bucket: str, tmp_path: Path
) -> None:
    backend = make_s3(tmp_path)
    other = make_s3(tmp_path)
    try:
        await backend.append(request("a", 0, 2))
        lost = lose_reply(backend._s3, "PutObject", _is_commit)
        result = await backend.append(request("a", 2, 1))
        assert lost, "the fault was not injected"
        assert (result.first_seq, result.last_seq, result.duplicate) == (3, 3, False)
        assert [e.seq for e in await other.read("a", 0)] == [1, 2, 3]
    finally:
        await backend.close()
        await other.close()


async def test_another_writers_identical_commit_is_still_a_conflict(
    bucket: str, tmp_path: Path
) -> None:
    """The token, not equal bytes, makes a commit ours: a writer whose append lost the
    slot to the same events sent by someone else did not write them."""
    a, b = make_s3(tmp_path), make_s3(tmp_path)
    a.endpoint_url = "another process"  # not the per-process lock b holds around its PUT
    try:
        await a.append(request("x", 0, 2))
        same = AppendRequest("x", 2, (RawEvent(3, "patch", 3.0, b"A", b"c"),))
        real = b._put_new

        def a_first(key: str, body: bytes, metadata: dict[str, str] | None = None) -> bool:
            if key.endswith(b._seq_name(3)):  # b saw head 2; a's append lands first
                asyncio.run_coroutine_threadsafe(a.append(same), loop).result()
            return real(key, body, metadata)

        loop = asyncio.get_running_loop()
        b._put_new = a_first  # type: ignore[method-assign]
        with pytest.raises(ConflictError):
            await b.append(same)
    finally:
        await a.close()
        await b.close()


async def test_a_rewrite_whose_reply_was_lost_is_done_not_a_conflict(
    bucket: str, tmp_path: Path
) -> None:
    backend = make_s3(tmp_path)
    try:
        await backend.append(request("r", 0, 2))
        lost = lose_reply(backend._s3, "PutObject", lambda r: "If-Match" in r.headers)
        await backend.rewrite(
            RewriteRequest("r", 2, None, (RawEvent(2, "patch", 2.0, b"new", b"c2"),))
        )
        assert lost, "the fault was not injected"
        assert [e.payload for e in await backend.read("r", 1)] == [b"new"]
    finally:
        await backend.close()


def test_a_backup_upload_whose_reply_was_lost_is_done_not_taken(bucket: str) -> None:
    s3: Any = _client()
    s3.create_bucket(Bucket=bucket)
    lost = lose_reply(s3, "PutObject")
    import io

    assert upload_new(s3, io.BytesIO(b"backup bytes"), bucket, "b.skb", replace=False) is True
    assert lost, "the fault was not injected"
    assert s3.get_object(Bucket=bucket, Key="b.skb")["Body"].read() == b"backup bytes"
    # and an object that was there before is still refused
    assert upload_new(_client(), io.BytesIO(b"other"), bucket, "b.skb", replace=False) is False
    assert s3.get_object(Bucket=bucket, Key="b.skb")["Body"].read() == b"backup bytes"


async def test_a_delete_whose_claim_reply_was_lost_is_done(bucket: str, tmp_path: Path) -> None:
    backend = make_s3(tmp_path)
    try:
        await backend.append(request("d", 0, 2))
        lost = lose_reply(backend._s3, "PutObject", _is_commit)
        assert await backend.delete_agent_at("d", 2) is True
        assert lost, "the fault was not injected"
        assert await backend.head("d") == 0
    finally:
        await backend.close()


def test_a_multipart_backup_whose_completion_reply_was_lost_is_done(bucket: str) -> None:
    """A backup large enough to go up in parts: the reply of the request that makes the
    object appear (CompleteMultipartUpload) lost. (A guard: moto answers the retried
    completion as done, S3 a 412 the token settles; this passed before the token too.)"""
    import io

    s3: Any = _client()
    s3.create_bucket(Bucket=bucket)
    lost = lose_reply(s3, "CompleteMultipartUpload")
    body = bytes(range(256)) * (9 * 2**20 // 256)  # above the 8 MiB threshold of parts
    assert upload_new(s3, io.BytesIO(body), bucket, "big.skb", replace=False) is True
    assert lost, "the fault was not injected"
    assert s3.get_object(Bucket=bucket, Key="big.skb")["Body"].read() == body
