"""What ``rewrite_claim_timeout`` does not fence on S3, pinned as docs/backends.md tells
it: a rewrite stalled past the bound between its claim check and a write lands that
write after an append broke its claim.

S3 makes a write conditional only on the object written: the append creates the next
commit and deletes the stale claim, and cannot change the commit the stalled rewrite
read and is about to overwrite (``If-Match`` on its ETag) short of rewriting every
commit and snapshot up to the head (a snapshot's bytes carry no write token: one
written again unchanged keeps its ETag). The rewrite then answers ``ConflictError`` at
its next write. Should this window ever be closed, this test says so. Real moto S3
server; the stall is a barrier in the rewriter's client, the bound's passing an
injected clock (no timing)."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("boto3")

from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest

from .test_s3_rewrite_claim import _rewrite, _stored, _stream
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, _Hooked, _wait, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_a_write_after_its_claim_check_lands_after_the_append(bucket: str) -> None:
    """Commits 1-2 and 3-4; a rewrite of events 2 and 4 stalls after its claim check for
    commit 1, before the PUT; an append past the bound breaks the claim and lands event
    5; the rewrite, resumed, writes commit 1 (event 2 rewritten under the appended
    event) and conflicts before commit 3."""
    creator = await _stream(bucket)
    rewriter, appender = _backend(bucket), _backend(bucket)
    stalled, appended = threading.Event(), threading.Event()
    try:
        hooked = _Hooked(rewriter._s3)
        rewriter._s3 = hooked

        def stall() -> None:  # (its claim checked: the PUT of commit 1 is next)
            stalled.set()
            _wait(appended)

        hooked.hooks.append(("put_object", _commit(1), stall))
        late = asyncio.create_task(rewriter.rewrite(_rewrite(b"new", b"t4'")))
        await asyncio.to_thread(_wait, stalled)
        try:
            now = appender._clock()
            appender._clock = lambda: now + appender.rewrite_claim_timeout + 1
            await appender.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        finally:
            appended.set()
        with pytest.raises(ConflictError):
            await late
        events, tag, _ = await _stored(creator)
        assert [(s, p) for s, p, _ in events] == [
            (1, b"old-1"),
            (2, b"new-2"),  # the late write, after the append
            (3, b"old-3"),
            (4, b"old-4"),
            (5, b"old-5"),
        ]
        assert tag == (5, b"t5")
    finally:
        appended.set()
        for backend in (creator, rewriter, appender):
            await backend.close()
