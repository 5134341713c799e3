"""A write meeting a rewrite's live claim on S3 says so: ``StreamClaimed`` (a
``ConflictError``, caught and retried as before) naming the agent, the claim's age and
``rewrite_claim_timeout``. Before, an append or ``delete_agent_at`` at the head the claim
copies raised ``ConflictError`` with expected == stored head, whose message said the
head record "was rewritten since this process read it ... reload the agent and write
again": a reload changed nothing, and a user could not tell a stuck rewrite from a
concurrent writer. Real moto S3 server; the rewrites are held inside their first commit
read (no timing), the clocks injected.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConflictError, StreamClaimed
from statekeeper.records import AppendRequest

from .test_s3_rewrite_claim import _After, _rewrite, _stored, _stream
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, _wait, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def _hold(
    backend: S3Backend, body: bytes, at: float
) -> tuple[asyncio.Task[None], threading.Event]:
    """``backend``'s rewrite of stream ``a`` (its claim dated ``at``), held after it read
    its first commit: its task, and the event that lets it go on."""
    paused, go = threading.Event(), threading.Event()
    hooked = _After(backend._s3)
    backend._s3 = hooked
    backend._clock = lambda: at

    def hold() -> None:
        paused.set()
        _wait(go)

    hooked.after.append(("get_object", _commit(1), hold))
    task = asyncio.create_task(backend.rewrite(_rewrite(body, body[:2])))
    await asyncio.to_thread(_wait, paused)
    return task, go


def _claim_secrets(creator: S3Backend) -> list[str]:
    """The claim's write token and request digest (never in a message)."""
    key = creator._agent_root("a") + "e/" + creator._seq_name(5)
    meta = creator._head_meta(key) or {}
    return [meta["w"], meta["rw"]]


def _check(exc: StreamClaimed, age: float, secrets: list[str]) -> None:
    assert isinstance(exc, ConflictError)
    assert (exc.agent_id, exc.expected_seq, exc.current_seq) == ("a", 4, 4)
    assert (exc.claim_age, exc.timeout) == (age, 600.0)
    text = str(exc)
    assert "'a'" in text and "claimed by a rewrite" in text
    assert f"made {age:.0f} s ago" in text and "rewrite_claim_timeout (600 s" in text
    assert "was rewritten" not in text
    for secret in secrets:
        assert secret not in text
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), str(back), back.claim_age) == (StreamClaimed, text, age)


async def _raises_claimed(call: Callable[[], Awaitable[Any]]) -> StreamClaimed:
    with pytest.raises(StreamClaimed) as caught:
        await call()
    return caught.value


async def test_an_append_meeting_a_live_claim_is_told_the_stream_is_claimed(bucket: str) -> None:
    """The append at the head the claim copies: StreamClaimed with the claim's age by
    the appender's clock (42 s) and the bound; nothing written, and once the rewrite
    is done the append lands."""
    creator = await _stream(bucket)
    rewriter, appender = _backend(bucket), _backend(bucket)
    appender._clock = lambda: 1042.0
    go = threading.Event()
    try:
        rewriting, go = await _hold(rewriter, b"new", 1000.0)
        secrets = await creator._run(_claim_secrets, creator)
        before = await _stored(creator)
        append = AppendRequest("a", 4, (_ev(5),), head_tag=b"t5")
        exc = await _raises_claimed(lambda: appender.append(append))
        _check(exc, 42.0, secrets)
        assert await _stored(creator) == before
        go.set()
        await rewriting
        await appender.append(append)
        assert await creator.head_tag("a") == (5, b"t5")
    finally:
        go.set()
        for backend in (creator, rewriter, appender):
            await backend.close()


async def test_a_delete_at_the_head_meeting_a_live_claim(bucket: str) -> None:
    """``delete_agent_at`` at the head under a young claim: StreamClaimed, nothing
    deleted."""
    creator = await _stream(bucket)
    rewriter, deleter = _backend(bucket), _backend(bucket)
    deleter._clock = lambda: 1007.0
    go = threading.Event()
    try:
        rewriting, go = await _hold(rewriter, b"new", 1000.0)
        secrets = await creator._run(_claim_secrets, creator)
        exc = await _raises_claimed(lambda: deleter.delete_agent_at("a", 4))
        _check(exc, 7.0, secrets)
        assert await creator.head("a") == 4
        go.set()
        await rewriting
    finally:
        go.set()
        for backend in (creator, rewriter, deleter):
            await backend.close()


async def test_a_rewrite_taken_over_is_told_its_taker_holds_the_stream(bucket: str) -> None:
    """Rewrite A is held; B takes its claim over and is held in turn. A, let go, finds
    B's claim at its next write, and A's retry respects it (it took A's): both
    StreamClaimed with B's claim's age by A's clock; B then finishes."""
    creator = await _stream(bucket)
    first, second = _backend(bucket), _backend(bucket)
    go_a = go_b = threading.Event()
    try:
        losing, go_a = await _hold(first, b"aaa", 1000.0)
        winning, go_b = await _hold(second, b"bbb", 1010.0)
        secrets = await creator._run(_claim_secrets, creator)
        first._clock = lambda: 1030.0
        go_a.set()
        exc = await _raises_claimed(lambda: losing)
        _check(exc, 20.0, secrets)
        retry = await _raises_claimed(lambda: first.rewrite(_rewrite(b"aaa", b"aa")))
        _check(retry, 20.0, secrets)
        go_b.set()
        await winning
        events, tag, _ = await _stored(creator)
        assert [(s, p) for s, p, _ in events][1::2] == [(2, b"bbb-2"), (4, b"bbb-4")]
        assert tag == (4, b"bb")
    finally:
        go_a.set()
        go_b.set()
        for backend in (creator, first, second):
            await backend.close()
