"""An S3 rewrite whose claim reads as *finished* while it still has writes to make.

A rewrite names its claim on each commit it writes (``rwby``); readers take a claim
over a newest commit naming it for a finished rewrite's, which an append (or another
rewrite) deletes at once (:mod:`statekeeper.backends.s3.claims`). But the newest
commit is not always the rewrite's last write: a prune that copied an older commit
(the part above its new base, ``_split``) after the rewrite listed the commits has the
rewrite rewrite that copy after its newest commit (``_rewrite_copies``). An append
landing in between deleted the claim and the rewrite, at its copy's claim check,
raised ConflictError having written the rest: the copy kept the old record (a
rekey's, a redaction's bytes undone there), the rewrite told nothing was done.
Now the copies made meanwhile are rewritten before the newest commit too, and a
rewrite whose finished claim went after that leaves the copies made later to the
prune (its copy made again from the rewritten commit). Real moto S3 server; the
interleaving is made with barriers in the clients (no timing)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3_rewrite_claim import _After
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, _Hooked, _wait, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_an_append_at_a_finished_looking_claim_leaves_the_rewrite_whole(
    bucket: str,
) -> None:
    """Commits 1-3 and 4-5 (head tag t5), a snapshot at 2. A rewrite of events 3-5 (and
    the head tag) lists the commits; a prune to 2 copies event 3 (commit 3, the old
    bytes) and is held before its switch; the rewrite writes commit 1, then commit 4
    (its newest) and is held; an append comes. Before: the append deleted the claim
    and landed, the rewrite raised ConflictError and commit 3 kept ``old-3``."""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    rewriter, pruner, appender = _backend(bucket), _backend(bucket), _backend(bucket)
    listed, copied, newest, appended, rewritten = (threading.Event() for _ in range(5))
    try:
        snap = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
        await creator.append(
            AppendRequest("a", 0, (_ev(1), _ev(2), _ev(3)), snapshot=snap, head_tag=b"t3")
        )
        await creator.append(AppendRequest("a", 3, (_ev(4), _ev(5)), head_tag=b"t5"))
        hooked_rw, hooked_pr = _After(rewriter._s3), _Hooked(pruner._s3)
        rewriter._s3, pruner._s3 = hooked_rw, hooked_pr

        def at_read() -> None:  # (the rewrite listed commits 1 and 4)
            listed.set()
            _wait(copied)

        def at_base() -> None:  # (the prune's copy of event 3 made, from the old bytes)
            copied.set()
            _wait(rewritten)

        def at_newest() -> None:
            newest.set()
            _wait(appended)

        hooked_rw.hooks.append(("get_object", _commit(1), at_read))
        hooked_pr.hooks.append(("get_object", _commit(1), lambda: _wait(listed)))
        base = "/e/b" + str(2).zfill(20)
        hooked_pr.hooks.append(("put_object", lambda kw: kw.get("Key", "").endswith(base), at_base))
        written = _commit(4)
        hooked_rw.after.append(
            ("put_object", lambda kw: written(kw) and "IfMatch" in kw, at_newest)
        )

        pruning = asyncio.ensure_future(pruner.prune("a", 2))
        new = tuple(_ev(s, b"new") for s in (3, 4, 5))
        rewriting = asyncio.ensure_future(
            rewriter.rewrite(RewriteRequest("a", 5, b"t5", new, head_tag=b"t5'"))
        )
        await asyncio.to_thread(_wait, newest)
        with contextlib.suppress(ConflictError):  # (refused, or landed: the rewrite stands)
            await appender.append(AppendRequest("a", 5, (_ev(6),), head_tag=b"t6"))
        appended.set()
        await rewriting  # (before: ConflictError, its claim deleted by the append)
        rewritten.set()
        await pruning
        stored = [(e.seq, e.payload) for e in await creator.read("a")]
        assert stored[:3] == [(3, b"new-3"), (4, b"new-4"), (5, b"new-5")]
    finally:
        for event in (listed, copied, newest, appended, rewritten):
            event.set()
        for backend in (creator, rewriter, pruner, appender):
            await backend.close()


async def test_a_copy_made_after_the_rewrites_last_look_is_left_to_its_prune(
    bucket: str,
) -> None:
    """The prune reads commit 1 before the rewrite writes it, and makes its copy of
    event 3 (old bytes) after the rewrite's look before its newest commit; it is held
    before it checks commit 1 again; the rewrite writes its newest commit and an append
    deletes its finished-looking claim. The rewrite, finding the stale copy with its
    claim gone, is done (the rest written, the copy the prune's to make again): it
    returns, the prune copies the rewritten commit. (A ConflictError here would tell a
    rewrite that stands as not done.)"""
    creator = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    rewriter, pruner, appender = _backend(bucket), _backend(bucket), _backend(bucket)
    events = [threading.Event() for _ in range(6)]
    got, looked, copied, newest, appended, rewritten = events
    try:
        snap = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
        await creator.append(
            AppendRequest("a", 0, (_ev(1), _ev(2), _ev(3)), snapshot=snap, head_tag=b"t3")
        )
        await creator.append(AppendRequest("a", 3, (_ev(4), _ev(5)), head_tag=b"t5"))
        hooked_rw, hooked_pr = _After(rewriter._s3), _Hooked(pruner._s3)
        rewriter._s3, pruner._s3 = hooked_rw, hooked_pr

        def at_copy() -> None:  # (the prune read commit 1, old bytes)
            got.set()
            _wait(looked)

        def at_newest_put() -> None:  # (the rewrite's look before its newest commit made)
            looked.set()
            _wait(copied)

        def at_check() -> None:  # (the prune's copy made, from the old bytes)
            copied.set()
            _wait(rewritten)

        def at_newest() -> None:
            newest.set()
            _wait(appended)

        written = _commit(4)
        hooked_pr.hooks.append(("put_object", _commit(3), at_copy))
        hooked_pr.hooks.append(("head_object", _commit(1), at_check))
        hooked_rw.hooks.append(("put_object", _commit(1), lambda: _wait(got)))
        hooked_rw.hooks.append(
            ("put_object", lambda kw: written(kw) and "IfMatch" in kw, at_newest_put)
        )
        hooked_rw.after.append(
            ("put_object", lambda kw: written(kw) and "IfMatch" in kw, at_newest)
        )

        pruning = asyncio.ensure_future(pruner.prune("a", 2))
        new = tuple(_ev(s, b"new") for s in (3, 4, 5))
        rewriting = asyncio.ensure_future(
            rewriter.rewrite(RewriteRequest("a", 5, b"t5", new, head_tag=b"t5'"))
        )
        await asyncio.to_thread(_wait, newest)
        await appender.append(AppendRequest("a", 5, (_ev(6),), head_tag=b"t6"))  # (finished)
        appended.set()
        await rewriting  # (ConflictError without the finished claim's check)
        rewritten.set()
        await pruning
        stored = [(e.seq, e.payload) for e in await creator.read("a")]
        assert stored == [(3, b"new-3"), (4, b"new-4"), (5, b"new-5"), (6, b"old-6")]
    finally:
        for event in events:
            event.set()
        for backend in (creator, rewriter, pruner, appender):
            await backend.close()
