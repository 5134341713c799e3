"""An S3 error part-way through a change (a prune, a rewrite, a delete, a
``rewrite_many``) after some of its writes landed: the ``BackendError`` says
``maybe_applied=True``.

S3 has no transaction over several objects: a prune writes its switch (the base object)
and then deletes what it hides; a rewrite writes its claim, then each commit it
rewrites; a delete writes its claim, then erases the objects. A botocore
``ClientError`` at a later request was told ``maybe_applied=False`` (nothing written),
and a caller (retention, a rekey, a migration) counted a change that stands, part-made
or whole, as not made. The error is injected by a client wrapper at one request (an
answer S3 gives: 400 ``InvalidRequest``, 403 ``AccessDenied``; no timing); the requests
before it reach a real moto S3 server. A request refused before any write of the change
landed is still ``maybe_applied=False``.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("boto3")

from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    ConnectionClosedError,
)

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3_rewrite_prune_race import _commit, _ev, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP

Match = Callable[[dict[str, Any]], bool]


class _Refusing:
    """A boto3 client whose ``count``-th ``name`` call matching ``when`` is refused
    with a ``ClientError`` (400, as S3 answers a request it will not take); every other
    call goes to the real client."""

    def __init__(self, inner: Any, name: str, when: Match, count: int, code: str, status: int):
        self.inner, self.name, self.when, self.left = inner, name, when, count
        self.code, self.status = code, status
        self.refused = 0

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self.inner, attr)
        if attr != self.name:
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.when(kwargs):
                self.left -= 1
                if self.left == 0:
                    self.refused += 1
                    raise ClientError(
                        {
                            "Error": {"Code": self.code, "Message": "refused here"},
                            "ResponseMetadata": {"HTTPStatusCode": self.status},
                        },
                        self.name.title().replace("_", ""),
                    )
            return method(*args, **kwargs)

        return call


@pytest.fixture
async def s3(bucket: str) -> AsyncIterator[S3Backend]:
    backend = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    await backend.initialize()
    try:
        yield backend
    finally:
        await backend.close()


async def _three_commits(s3: S3Backend, agent_id: str = "a") -> None:
    """``agent_id``: commits 1-2, 3-4 (a snapshot at 4) and 5-6."""
    await s3.append(AppendRequest(agent_id, 0, (_ev(1), _ev(2))))
    snap = RawSnapshot(4, 4.0, b"state-4", b"ssum-4")
    await s3.append(AppendRequest(agent_id, 2, (_ev(3), _ev(4)), snapshot=snap))
    await s3.append(AppendRequest(agent_id, 4, (_ev(5), _ev(6))))


def _refuse(
    s3: S3Backend,
    name: str,
    when: Match = lambda _: True,
    *,
    count: int = 1,
    code: str = "InvalidRequest",
    status: int = 400,
) -> _Refusing:
    client = _Refusing(s3._s3, name, when, count, code, status)
    s3._s3 = client
    return client


@pytest.mark.parametrize("code,status", [("InvalidRequest", 400), ("AccessDenied", 403)])
async def test_a_prune_refused_after_its_switch_may_stand(
    s3: S3Backend, code: str, status: int
) -> None:
    """(AccessDenied: was BackendUnavailable, "credentials refused", nothing written)"""
    await _three_commits(s3)
    # (what the base hides, deleted after the switch)
    refusing = _refuse(s3, "delete_objects", code=code, status=status)
    with pytest.raises(BackendError, match="part-way") as caught:
        await s3.prune("a", 4)
    assert refusing.refused == 1
    assert caught.value.maybe_applied  # was: False
    s3._s3 = refusing.inner
    assert [e.seq for e in await s3.read("a")] == [5, 6]  # (the prune stands)


async def test_a_prune_refused_at_its_first_write_wrote_nothing(s3: S3Backend) -> None:
    await _three_commits(s3)
    refusing = _refuse(s3, "put_object")  # (its switch: the base object)
    with pytest.raises(BackendError) as caught:
        await s3.prune("a", 4)
    assert refusing.refused == 1
    assert not caught.value.maybe_applied
    s3._s3 = refusing.inner
    assert [e.seq for e in await s3.read("a")] == [1, 2, 3, 4, 5, 6]


async def test_a_rewrite_refused_at_its_last_commit_may_stand(s3: S3Backend) -> None:
    await _three_commits(s3)
    # events 1 and 6: the commits 1-2 and 5-6 rewritten, the newest (the head tag) last
    new = (_ev(1, b"new"), _ev(6, b"new"))
    refusing = _refuse(s3, "put_object", _commit(5))
    with pytest.raises(BackendError, match="part-way") as caught:
        await s3.rewrite(RewriteRequest("a", 6, None, new))
    assert refusing.refused == 1
    assert caught.value.maybe_applied  # was: False
    s3._s3 = refusing.inner
    assert (await s3.read("a", 0, 1))[0].payload == b"new-1"  # (part-made)


async def test_a_delete_refused_part_way_may_stand(s3: S3Backend) -> None:
    await _three_commits(s3)
    refusing = _refuse(s3, "delete_objects")  # (after its claim)
    with pytest.raises(BackendError, match="part-way") as caught:
        await s3.delete_agent("a")
    assert refusing.refused == 1
    assert caught.value.maybe_applied  # was: False


@pytest.mark.parametrize("code,status", [("InvalidRequest", 400), ("AccessDenied", 403)])
async def test_a_rewrite_many_refused_at_its_second_request_may_stand(
    s3: S3Backend, code: str, status: int
) -> None:
    """(AccessDenied, say a policy on the second agent's keys: was BackendUnavailable,
    "credentials refused", no maybe_applied — the first request's rewrite standing)"""
    await _three_commits(s3, "a")
    await _three_commits(s3, "b")
    # the second request's first write (its claim) refused: nothing of it written,
    # but the first request's rewrite stands
    b_keys = lambda kw: "/" + b"b".hex() + "/" in kw["Key"]  # noqa: E731
    refusing = _refuse(s3, "put_object", b_keys, code=code, status=status)
    with pytest.raises(BackendError, match="'b'" if status == 403 else None) as caught:
        await s3.rewrite_many(
            [
                RewriteRequest("a", 6, None, (_ev(1, b"new"),)),
                RewriteRequest("b", 6, None, (_ev(1, b"new"),)),
            ]
        )
    assert refusing.refused == 1
    assert caught.value.maybe_applied  # was: False
    s3._s3 = refusing.inner
    assert (await s3.read("a", 0, 1))[0].payload == b"new-1"
    assert (await s3.read("b", 0, 1))[0].payload == b"old-1"


async def test_a_prune_whose_switch_landed_on_a_lost_reply_may_stand(s3: S3Backend) -> None:
    """The switch's first try lands and its reply is lost (the connection closed): botocore
    sends it again, S3 answers 412 (the object is there) and the prune knows it for its
    own write (:meth:`_ours`) — then a later request is refused. Was: that write, answered
    412, was not counted as landed: ``maybe_applied=False`` (AccessDenied:
    BackendUnavailable, "credentials refused"), the prune standing."""
    await _three_commits(s3)
    lost: list[str] = []

    def first_try_lands(request: Any, **_: Any) -> None:
        if request.method != "PUT" or "/e/b" not in request.url or lost:
            return
        # the first try, sent as signed, reaches S3; its reply never comes back
        sent = urllib.request.Request(
            request.url, data=request.body, headers=dict(request.headers), method="PUT"
        )
        with urllib.request.urlopen(sent) as reply:
            assert reply.status == 200
        lost.append(request.url)
        raise ConnectionClosedError(endpoint_url=request.url)

    s3._s3.meta.events.register_first("before-send.s3.PutObject", first_try_lands)
    refusing = _refuse(s3, "delete_objects", code="AccessDenied", status=403)
    with pytest.raises(BackendError, match="part-way") as caught:
        await s3.prune("a", 4)
    assert lost and refusing.refused == 1
    assert caught.value.maybe_applied  # was: BackendUnavailable, no maybe_applied
    s3._s3 = refusing.inner
    assert [e.seq for e in await s3.read("a")] == [5, 6]  # (the prune stands)
