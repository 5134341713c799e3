"""A rewrite on S3 racing a prune of the same stream: the rewrite must not report success
while the stream keeps its old bytes (a key rotation, a migration, a redaction undone
without an error).

S3 has no transaction over several objects. A prune whose new base cuts a commit copies
the part after the base into a commit of its own (``_split``: GET the commit, then
create the copy), writes the base object, and deletes the old commit. A rewrite
rewrites the commits it listed (a conditional PUT, ``If-Match`` on the ETag it read).
Two interleavings lost the rewrite, answered success:

* the prune read the commit, the rewrite replaced it, the prune created its copy from
  the bytes it had read (old events, old head tag);
* the prune created its copy after the rewrite listed the commits: the rewrite replaced
  the old commit only (hidden by the base, then deleted), never the copy.

Either way the live copy kept the old records and the old head tag. Now the prune reads
the commit again after its copy and, when it changed since (a rewrite), writes the copy
again from it (``If-Match`` on the copy: never over a rewrite of the copy); and the
rewrite lists the commits again after its writes and rewrites a copy made meanwhile.
Real moto S3 server; the interleavings are made with barriers in the clients (no
timing).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConfigurationError
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3 import _bucket_name, _drop_bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _Hooked:
    """A boto3 client whose ``name`` calls matching ``when`` run ``before`` first."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hooks: list[tuple[str, Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            for hooked, when, before in list(self.hooks):
                if hooked == name and when(kwargs):
                    self.hooks.remove((hooked, when, before))
                    before()
            return method(*args, **kwargs)

        return call


def _wait(event: threading.Event) -> None:
    """Until ``event`` (a bound only so that a broken test fails instead of hanging)."""
    assert event.wait(120)


def _backend(bucket: str) -> S3Backend:
    return S3Backend(bucket, "agents", endpoint_url=moto_endpoint(), **s3_credentials())


def _ev(seq: int, body: bytes = b"old") -> RawEvent:
    return RawEvent(seq, "step", float(seq), body + b"-%d" % seq, body + b"-sum-%d" % seq)


def _commit(seq: int) -> Any:
    return lambda kw: kw.get("Key", "").endswith("/e/" + str(seq).zfill(20))


@pytest.fixture
def bucket(tmp_path: Path) -> Any:
    moto_endpoint()
    name = _bucket_name(tmp_path)
    yield name
    _drop_bucket(name)


async def _race(bucket: str, arrange: Any) -> tuple[list[RawEvent], Any]:
    """Stream ``a``: one commit of events 1-5 (head tag t5), a snapshot at 3. A rewrite of
    events 4 and 5 (and the head tag) races ``prune("a", 3)``, interleaved by
    ``arrange(rewriter_client, pruner_client, rewritten)``."""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    rewriter, pruner = _backend(bucket), _backend(bucket)
    try:
        snap = RawSnapshot(3, 3.0, b"state-3", b"ssum-3")
        events = tuple(_ev(s) for s in range(1, 6))
        await creator.append(AppendRequest("a", 0, events, snapshot=snap, head_tag=b"t5"))
        hooked_rw, hooked_pr = _Hooked(rewriter._s3), _Hooked(pruner._s3)
        rewriter._s3, pruner._s3 = hooked_rw, hooked_pr
        rewritten = threading.Event()
        arrange(hooked_rw, hooked_pr, rewritten)
        pruning = asyncio.create_task(pruner.prune("a", 3))
        new = (_ev(4, b"new"), _ev(5, b"new"))
        await rewriter.rewrite(RewriteRequest("a", 5, b"t5", new, head_tag=b"t5'"))
        rewritten.set()
        await pruning
        return await creator.read("a"), await creator.head_tag("a")
    finally:
        rewritten.set()
        for backend in (creator, rewriter, pruner):
            await backend.close()


async def test_a_copy_made_from_the_commit_read_before_the_rewrite_is_made_again(
    bucket: str,
) -> None:
    def arrange(rw: _Hooked, pr: _Hooked, rewritten: threading.Event) -> None:
        # the prune has read the commit 1-5 when the rewrite replaces it; its copy of
        # 4-5 is created after the rewrite returned
        read = threading.Event()

        def at_copy() -> None:
            read.set()
            _wait(rewritten)

        pr.hooks.append(("put_object", _commit(4), at_copy))
        rw.hooks.append(("put_object", _commit(1), lambda: _wait(read)))

    events, tag = await _race(bucket, arrange)
    assert [(e.seq, e.payload) for e in events] == [(4, b"new-4"), (5, b"new-5")]
    assert tag == (5, b"t5'")


async def test_a_copy_made_while_the_rewrite_ran_is_rewritten_too(bucket: str) -> None:
    def arrange(rw: _Hooked, pr: _Hooked, rewritten: threading.Event) -> None:
        listed, copied = threading.Event(), threading.Event()

        # the rewrite has listed the commits (1 only) when the prune reads commit 1, and
        # reads it once the prune's copy exists; the prune's switch (the base object)
        # waits for the rewrite's end
        def at_read() -> None:
            listed.set()
            _wait(copied)

        rw.hooks.append(("get_object", _commit(1), at_read))
        pr.hooks.append(("get_object", _commit(1), lambda: _wait(listed)))
        base = "/e/b" + str(3).zfill(20)

        def at_base() -> None:
            copied.set()
            _wait(rewritten)

        pr.hooks.append(("put_object", lambda kw: kw.get("Key", "").endswith(base), at_base))

    events, tag = await _race(bucket, arrange)
    assert [(e.seq, e.payload) for e in events] == [(4, b"new-4"), (5, b"new-5")]
    assert tag == (5, b"t5'")


@pytest.mark.parametrize("named", [(4, 5), (2, 4)])
async def test_a_commit_pruned_after_the_rewrite_listed_it(
    bucket: str, named: tuple[int, ...]
) -> None:
    """The prune whole (copy, base, deletion of the commit) between the rewrite's listing
    and its read of the commit: the rewrite lists again and rewrites the copy; a record
    it names below the new base is refused (before: BackendError, NoSuchKey)."""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    rewriter, pruner = _backend(bucket), _backend(bucket)
    listed, pruned = threading.Event(), threading.Event()
    try:
        snap = RawSnapshot(3, 3.0, b"state-3", b"ssum-3")
        events = tuple(_ev(s) for s in range(1, 6))
        await creator.append(AppendRequest("a", 0, events, snapshot=snap, head_tag=b"t5"))
        hooked = _Hooked(rewriter._s3)
        rewriter._s3 = hooked

        def at_read() -> None:
            listed.set()
            _wait(pruned)

        hooked.hooks.append(("get_object", _commit(1), at_read))
        new = tuple(_ev(s, b"new") for s in named)
        request = RewriteRequest("a", 5, b"t5", new, head_tag=b"t5'")
        rewriting = asyncio.create_task(rewriter.rewrite(request))
        await asyncio.to_thread(_wait, listed)
        await pruner.prune("a", 3)
        pruned.set()
        if 2 in named:
            with pytest.raises(ConfigurationError, match=r"'a'.* seq 2\b"):
                await rewriting
            expected = [(4, b"old-4"), (5, b"old-5")], (5, b"t5")
        else:
            await rewriting
            expected = [(4, b"new-4"), (5, b"new-5")], (5, b"t5'")
        stored = await creator.read("a")
        assert ([(e.seq, e.payload) for e in stored], await creator.head_tag("a")) == expected
    finally:
        pruned.set()
        for backend in (creator, rewriter, pruner):
            await backend.close()
