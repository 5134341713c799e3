"""A rewrite on S3 (a rekey, a migration, a redaction) racing an append or another rewrite
of the same stream: exactly one of them wins, the other raises ConflictError having
changed nothing.

S3 has no transaction over several objects: a rewrite checks the head, then rewrites the
commits one by one (the newest, carrying the head tag, last). Before, nothing held the
head between that check and the writes:

* an append landing at ``head + 1`` meanwhile was acknowledged, and the rewrite too: its
  head tag went onto a commit no longer the newest (lost), its rewritten head event no
  longer the one the appended event follows;
* a second rewrite with the same expected head overwrote the snapshots unconditionally
  and rewrote the commits over the first one's (read after it: ``If-Match`` passed), both
  answered success, the first one's change partly undone.

Now a rewrite first *claims* the stream, as a delete does: an empty commit marked as a
rewrite's, created (``IfNoneMatch``) at the slot the next append would take, deleted when
the rewrite is done. Real moto S3 server; the interleavings are made with barriers in the
clients (no timing).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, _Hooked, _wait, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _After(_Hooked):
    """A hooked client whose ``name`` calls matching ``when`` run ``after`` once they
    returned."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.after: list[tuple[str, Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        method = super().__getattr__(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            for hooked, when, after in list(self.after):
                if hooked == name and when(kwargs):
                    self.after.remove((hooked, when, after))
                    after()
            return result

        return call


async def _stream(bucket: str) -> S3Backend:
    """Stream ``a``: commits 1-2 and 3-4 (head tag t4), a snapshot at 4."""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    await creator.append(AppendRequest("a", 0, (_ev(1), _ev(2)), head_tag=b"t2"))
    snap = RawSnapshot(4, 4.0, b"state-4", b"ssum-4")
    await creator.append(AppendRequest("a", 2, (_ev(3), _ev(4)), snapshot=snap, head_tag=b"t4"))
    return creator


def _rewrite(body: bytes, tag: bytes) -> RewriteRequest:
    """A rewrite of events 2 and 4, the snapshot at 4 and the head tag, as ``body``."""
    snap = RawSnapshot(4, 4.0, b"state-4-" + body, b"ssum-4-" + body)
    events = (_ev(2, body), _ev(4, body))
    return RewriteRequest("a", 4, b"t4", events, snapshots=(snap,), head_tag=tag)


async def _stored(backend: S3Backend) -> tuple[Any, ...]:
    snap = await backend.latest_snapshot("a")
    events = [(e.seq, e.payload, e.checksum) for e in await backend.read("a")]
    return events, await backend.head_tag("a"), snap


async def test_an_append_during_a_rewrite_conflicts(bucket: str) -> None:
    """The append lands at ``head + 1`` between the rewrite's head check and its writes:
    before, both were acknowledged (the rewrite's head tag on a commit no longer the
    newest, head tag read (5, None)); now the append conflicts and the rewrite stands."""
    creator = await _stream(bucket)
    rewriter, appender = _backend(bucket), _backend(bucket)
    paused, appended = threading.Event(), threading.Event()
    try:
        hooked = _Hooked(rewriter._s3)
        rewriter._s3 = hooked

        def at_write() -> None:
            paused.set()
            _wait(appended)

        # (the rewrite's write of commit 1: after its head check, and its claim)
        hooked.hooks.append(("put_object", _commit(1), at_write))
        rewriting = asyncio.create_task(rewriter.rewrite(_rewrite(b"new", b"t4'")))
        await asyncio.to_thread(_wait, paused)
        try:
            with pytest.raises(ConflictError):
                await appender.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        finally:
            appended.set()
        await rewriting
        events, tag, snap = await _stored(creator)
        assert [(s, p) for s, p, _ in events] == [
            (1, b"old-1"),
            (2, b"new-2"),
            (3, b"old-3"),
            (4, b"new-4"),
        ]
        assert tag == (4, b"t4'")
        assert snap is not None and snap.payload == b"state-4-new"
        # the claim is gone with the rewrite: the next append at the head lands
        await appender.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        assert await creator.head_tag("a") == (5, b"t5")
    finally:
        appended.set()
        for backend in (creator, rewriter, appender):
            await backend.close()


async def test_of_two_rewrites_at_one_head_the_loser_changes_nothing(bucket: str) -> None:
    """Rewrite A checked the head (4, t4) and waits after that; rewrite B, same
    expected head, runs whole. Before, A then overwrote B's snapshot and rewrote the
    commits over B's (``If-Match`` on the ETag it read after B): both succeeded, B's
    change undone. Now B holds the claim A needs: A conflicts (B ran first, so B wins);
    what is stored is B's, whole."""
    creator = await _stream(bucket)
    first, second = _backend(bucket), _backend(bucket)
    paused, done = threading.Event(), threading.Event()
    try:
        hooked = _After(first._s3)
        first._s3 = hooked

        def at_checked() -> None:
            paused.set()
            _wait(done)

        # A has read the newest commit's head and head tag (its check), B runs whole
        hooked.after.append(("head_object", _commit(3), at_checked))
        losing = asyncio.create_task(first.rewrite(_rewrite(b"aaa", b"tA")))
        await asyncio.to_thread(_wait, paused)
        try:
            await second.rewrite(_rewrite(b"bbb", b"tB"))
        finally:
            done.set()
        with pytest.raises(ConflictError):
            await losing
        events, tag, snap = await _stored(creator)
        assert [(s, p) for s, p, _ in events] == [
            (1, b"old-1"),
            (2, b"bbb-2"),
            (3, b"old-3"),
            (4, b"bbb-4"),
        ]
        assert tag == (4, b"tB")
        assert snap is not None and snap.payload == b"state-4-bbb"
    finally:
        done.set()
        for backend in (creator, first, second):
            await backend.close()


async def test_a_rewrite_taken_over_writes_nothing_more(bucket: str) -> None:
    """Rewrite B starts while A holds the claim (A paused having read its first commit,
    before writing it): B takes the claim over (a claim cannot tell a running rewrite
    from a dead process's, and a dead one's must not leave the agent unwritable) and
    runs whole; A then finds the claim no longer its own and conflicts, writing
    nothing: what is stored is B's, whole, and the claim is gone."""
    creator = await _stream(bucket)
    first, second = _backend(bucket), _backend(bucket)
    paused, done = threading.Event(), threading.Event()
    try:
        hooked = _After(first._s3)
        first._s3 = hooked

        def at_write() -> None:
            paused.set()
            _wait(done)

        hooked.after.append(("get_object", lambda kw: "/e/" in kw.get("Key", ""), at_write))
        losing = asyncio.create_task(first.rewrite(_rewrite(b"aaa", b"tA")))
        await asyncio.to_thread(_wait, paused)
        try:
            await second.rewrite(_rewrite(b"bbb", b"tB"))
        finally:
            done.set()
        with pytest.raises(ConflictError):
            await losing
        events, tag, snap = await _stored(creator)
        assert [(s, p) for s, p, _ in events] == [
            (1, b"old-1"),
            (2, b"bbb-2"),
            (3, b"old-3"),
            (4, b"bbb-4"),
        ]
        assert tag == (4, b"tB")
        assert snap is not None and snap.payload == b"state-4-bbb"
        await creator.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
    finally:
        done.set()
        for backend in (creator, first, second):
            await backend.close()


async def test_a_head_tag_rewrite_of_a_prune_copy_is_not_overwritten(bucket: str) -> None:
    """``If-Match`` compares the ETag, the digest of the body: a rewrite of the head tag
    alone (metadata) kept it. A prune making its copy of the commit 1-5 again (rewrite A
    changed the commit after the prune read it) read the copy before rewrite B set
    another head tag on it, and its ``If-Match`` still matched: B's head tag was undone,
    B answered success. Now every overwrite of a commit writes other bytes (a write's
    own record, which reads skip)."""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    first, second, pruner = _backend(bucket), _backend(bucket), _backend(bucket)
    rewritten, copying, done = threading.Event(), threading.Event(), threading.Event()
    read = threading.Event()
    try:
        snap = RawSnapshot(3, 3.0, b"state-3", b"ssum-3")
        events = tuple(_ev(s) for s in range(1, 6))
        await creator.append(AppendRequest("a", 0, events, snapshot=snap, head_tag=b"t5"))
        hooked = _Hooked(pruner._s3)
        pruner._s3 = hooked

        def at_copy() -> None:  # the prune read commit 1: A runs whole before the copy
            read.set()
            _wait(rewritten)
            hooked.hooks.append(("put_object", _commit(4), at_copy_again))

        def at_copy_again() -> None:  # the prune read A's commit 1 and the copy: B runs
            copying.set()
            _wait(done)

        hooked.hooks.append(("put_object", _commit(4), at_copy))
        hooked_a = _Hooked(first._s3)
        first._s3 = hooked_a
        hooked_a.hooks.append(("put_object", _commit(1), lambda: _wait(read)))
        pruning = asyncio.create_task(pruner.prune("a", 3))
        try:
            await first.rewrite(RewriteRequest("a", 5, b"t5", (), head_tag=b"tA"))
            rewritten.set()
            await asyncio.to_thread(_wait, copying)
            # (the newest commit now: the copy, made from the bytes before A's rewrite)
            await second.rewrite(RewriteRequest("a", 5, b"t5", (), head_tag=b"tB"))
        finally:
            rewritten.set()
            done.set()
        await pruning
        assert await creator.head_tag("a") == (5, b"tB")
        assert [(e.seq, e.payload) for e in await creator.read("a")] == [
            (4, b"old-4"),
            (5, b"old-5"),
        ]
    finally:
        read.set()
        rewritten.set()
        done.set()
        for backend in (creator, first, second, pruner):
            await backend.close()


async def test_a_claim_left_by_a_dead_rewrite(bucket: str) -> None:
    """A process killed during a rewrite leaves its claim (made here without the rest):
    the stream reads as before, appends at the head conflict while the claim is younger
    than ``rewrite_claim_timeout``, a later rewrite (another request) takes the claim
    over and finishes, and the appends land after it; ``delete_agent`` deletes a
    claimed stream."""
    creator = await _stream(bucket)
    other = _backend(bucket)
    try:
        before = await _stored(creator)
        await creator._run(creator._claim_rewrite, _rewrite(b"new", b"t4'"))  # (dead)
        assert await _stored(creator) == before
        assert await creator.head("a") == 4
        with pytest.raises(ConflictError):
            await other.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        assert await _stored(creator) == before
        await other.rewrite(_rewrite(b"bbb", b"tB"))
        events, tag, _ = await _stored(creator)
        assert [(s, p) for s, p, _ in events][1::2] == [(2, b"bbb-2"), (4, b"bbb-4")]
        assert tag == (4, b"tB")
        await other.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        assert await creator.head_tag("a") == (5, b"t5")
        await creator._run(creator._claim_rewrite, _rewrite_at(5, b"t5"))
        assert await other.delete_agent("a") is True
        assert await creator.head("a") == 0
        assert await creator._run(creator._list, creator._agent_root("a") + "e/") == []
    finally:
        for backend in (creator, other):
            await backend.close()


async def test_an_append_breaks_a_claim_older_than_the_bound(bucket: str) -> None:
    """A rewrite paused after its claim (its process as good as dead): before, every
    append to the agent conflicted until the same request came again. An append whose
    clock is past ``rewrite_claim_timeout`` deletes the claim and lands; the rewrite,
    resumed, conflicts at its next write and writes nothing."""
    creator = await _stream(bucket)
    rewriter, appender = _backend(bucket), _backend(bucket)
    paused, done = threading.Event(), threading.Event()
    try:
        hooked = _After(rewriter._s3)
        rewriter._s3 = hooked

        def at_write() -> None:
            paused.set()
            _wait(done)

        hooked.after.append(("get_object", lambda kw: "/e/" in kw.get("Key", ""), at_write))
        late = asyncio.create_task(rewriter.rewrite(_rewrite(b"new", b"t4'")))
        await asyncio.to_thread(_wait, paused)
        before = await _stored(creator)
        try:
            with pytest.raises(ConflictError):  # (a young claim: a running rewrite's)
                await appender.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
            now = appender._clock()
            appender._clock = lambda: now + appender.rewrite_claim_timeout + 1
            await appender.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        finally:
            done.set()
        with pytest.raises(ConflictError):
            await late
        events, tag, snap = await _stored(creator)
        assert events == [*before[0], (5, b"old-5", b"old-sum-5")]
        assert (tag, snap) == ((5, b"t5"), before[2])
    finally:
        done.set()
        for backend in (creator, rewriter, appender):
            await backend.close()


def _rewrite_at(head: int, tag: bytes) -> RewriteRequest:
    return RewriteRequest("a", head, tag, (_ev(1, b"x"),), head_tag=b"t")


async def test_a_copy_of_a_request_failing_stops_the_first(bucket: str) -> None:
    """Two copies of one request: A holds the claim (paused having read its first
    commit), B (the same request) takes it over and fails before writing, deleting its
    claim. Before, both shared the claim's token (one per request): A went on writing
    with no claim held (an append could land meanwhile) and answered success. Now each
    attempt has its own: A conflicts, writing nothing."""
    creator = await _stream(bucket)
    first, second = _backend(bucket), _backend(bucket)
    paused, done = threading.Event(), threading.Event()
    try:
        hooked = _After(first._s3)
        first._s3 = hooked

        def at_write() -> None:
            paused.set()
            _wait(done)

        hooked.after.append(("get_object", lambda kw: "/e/" in kw.get("Key", ""), at_write))
        before = await _stored(creator)
        losing = asyncio.create_task(first.rewrite(_rewrite(b"aaa", b"tA")))
        await asyncio.to_thread(_wait, paused)
        failing = _Hooked(second._s3)
        second._s3 = failing

        def fail() -> None:
            raise OSError("connection lost")

        failing.hooks.append(("get_object", lambda kw: "/e/" in kw.get("Key", ""), fail))
        try:
            with pytest.raises(OSError):
                await second.rewrite(_rewrite(b"aaa", b"tA"))
        finally:
            done.set()
        with pytest.raises(ConflictError):
            await losing
        assert await _stored(creator) == before
    finally:
        done.set()
        for backend in (creator, first, second):
            await backend.close()
