"""An S3 rewrite whose claim another rewrite took over after some of its commits were
rewritten: its next write is refused with :class:`~statekeeper.errors.StreamClaimed`
(the claim's age and ``rewrite_claim_timeout``: what ``statekeeper rekey`` gives up
with, a stuck rewrite told from a busy writer) — and, part-way, ``maybe_applied``.

Was (since the part-way conflict said ``maybe_applied``): the conflict was built
again as a plain ``ConflictError``, the ``StreamClaimed`` (its type, ``claim_age``,
``timeout``) lost. The take-over is a real write to moto's S3 server by a second
client (the claim's token overwritten, as another rewrite's claim does), made just
after the rewrite read the commit it writes next (no timing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.s3.base import _WRITE
from statekeeper.errors import ConflictError, StreamClaimed
from statekeeper.records import RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3_part_way import _three_commits
from .test_s3_part_way_conflict import _ChangedFirst
from .test_s3_rewrite_prune_race import _commit, _ev, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _TakenOver:
    """A boto3 client whose first ``get_object`` of commit 5 is followed by another
    rewrite's take-over of the claim (at the slot after head 6: its token replaced)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.other = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
        self.taken = 0

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self.inner, attr)
        if attr != "get_object":
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            if _commit(5)(kwargs) and not self.taken:
                self.taken += 1
                where = {"Bucket": kwargs["Bucket"], "Key": kwargs["Key"][:-20] + "7".zfill(20)}
                claim = self.other.get_object(**where)
                meta = dict(claim.get("Metadata", {}))
                meta[_WRITE] = "another-rewrite"
                self.other.put_object(**where, Body=claim["Body"].read(), Metadata=meta)
            return answer

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


async def test_a_rewrite_taken_over_part_way_says_stream_claimed(s3: S3Backend) -> None:
    await _three_commits(s3)
    taking = _TakenOver(s3._s3)
    s3._s3 = taking
    with pytest.raises(StreamClaimed, match="part-way") as caught:  # was: ConflictError
        await s3.rewrite(RewriteRequest("a", 6, None, (_ev(1, b"new"), _ev(6, b"new"))))
    assert taking.taken == 1
    assert getattr(caught.value, "maybe_applied", False)
    assert caught.value.timeout == s3.rewrite_claim_timeout
    s3._s3 = taking.inner
    assert (await s3.read("a", 0, 1))[0].payload == b"new-1"  # (part-made)
    assert "nothing changed" not in str(caught.value)  # (part of it stands)


async def test_a_rewrite_refused_part_way_does_not_say_nothing_was_written(
    s3: S3Backend,
) -> None:
    """(a 412 at its last commit, the head record's: its conflict at the same head said
    "nothing was written; reload the agent", then "part-way: some records ... stand")"""
    await _three_commits(s3)
    s3._s3 = _ChangedFirst(s3._s3, _commit(5))
    with pytest.raises(ConflictError, match="part-way") as caught:
        await s3.rewrite(RewriteRequest("a", 6, None, (_ev(1, b"new"), _ev(6, b"new"))))
    assert "nothing was written" not in str(caught.value)
