"""A conflict part-way through an S3 rewrite (a commit changed under it after some of
its commits were rewritten: S3 answers its ``If-Match`` write 412) says
``maybe_applied=True``: the records rewritten before it stand. It is still a
``ConflictError`` (rekey, migrate and a rewrite taken over read again and retry);
``rewrite_many`` raises it as a ``BackendError(maybe_applied=True)``, not False.

S3 has no transaction over several objects: a rewrite writes its claim, then each
commit it rewrites, the newest last. A commit changed by another writer between the
rewrite's read of it and its conditional write is refused (412) and the rewrite raises
a conflict — which said nothing was written (a ``ConflictError``), though the commits
before it were rewritten: retention, rekey and migrate counted a change that partly
stands as not made (``rewrite_many``: False, "its head was not the expected one").
The change under the rewrite is a real write to moto's S3 server, made by a client
wrapper just before the rewrite's own write of that commit (no timing)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.s3.layout import _decode_events, _encode_events
from statekeeper.errors import BackendError, ConflictError
from statekeeper.records import RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3_part_way import _three_commits
from .test_s3_rewrite_prune_race import _commit, _ev, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _ChangedFirst:
    """A boto3 client whose first conditional ``put_object`` matching ``when`` finds
    its object changed by another writer just before (its records written again under
    that writer's token: a new ETag): S3 refuses it with 412."""

    def __init__(self, inner: Any, when: Callable[[dict[str, Any]], bool]) -> None:
        self.inner, self.when = inner, when
        self.other = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
        self.changed = 0

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self.inner, attr)
        if attr != "put_object":
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if "IfMatch" in kwargs and self.when(kwargs) and not self.changed:
                self.changed += 1
                where = {"Bucket": kwargs["Bucket"], "Key": kwargs["Key"]}
                stored = self.other.get_object(**where)
                events = _decode_events("a", stored["Body"].read())
                self.other.put_object(  # (the same records, another writer's token)
                    **where,
                    Body=_encode_events(events, "another"),
                    Metadata=stored.get("Metadata", {}),
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


async def test_a_rewrite_conflicting_at_its_last_commit_may_stand(s3: S3Backend) -> None:
    await _three_commits(s3)
    # events 1 and 6: the commits 1-2 and 5-6 rewritten, the newest (the head tag) last
    changing = _ChangedFirst(s3._s3, _commit(5))
    s3._s3 = changing
    with pytest.raises(ConflictError, match="part-way") as caught:
        await s3.rewrite(RewriteRequest("a", 6, None, (_ev(1, b"new"), _ev(6, b"new"))))
    assert changing.changed == 1
    # (still a conflict: its callers read again and retry; was: "nothing was written")
    assert getattr(caught.value, "maybe_applied", False)
    s3._s3 = changing.inner
    assert (await s3.read("a", 0, 1))[0].payload == b"new-1"  # (part-made)


async def test_rewrite_many_does_not_count_it_as_not_applied(s3: S3Backend) -> None:
    await _three_commits(s3)
    changing = _ChangedFirst(s3._s3, _commit(5))
    s3._s3 = changing
    with pytest.raises(BackendError, match="part-way") as caught:  # was: [False]
        await s3.rewrite_many([RewriteRequest("a", 6, None, (_ev(1, b"new"), _ev(6, b"new")))])
    assert caught.value.maybe_applied


async def test_a_rewrite_conflicting_at_its_first_commit_wrote_nothing(s3: S3Backend) -> None:
    """(its claim aside, removed: still a ConflictError, nothing of the stream written)"""
    await _three_commits(s3)
    changing = _ChangedFirst(s3._s3, _commit(1))
    s3._s3 = changing
    with pytest.raises(ConflictError) as caught:
        await s3.rewrite(RewriteRequest("a", 6, None, (_ev(1, b"new"), _ev(6, b"new"))))
    assert changing.changed == 1
    assert not getattr(caught.value, "maybe_applied", False)
    s3._s3 = changing.inner
    assert [e.payload for e in await s3.read("a")] == [b"old-%d" % i for i in range(1, 7)]
    assert (await s3.head_tag("a"))[0] == 6
