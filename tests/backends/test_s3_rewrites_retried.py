"""Two rewrites of one S3 stream at once, each retried by its caller on ``ConflictError``
(as the store's rekey and migrate do): they must not knock each other out for ever.

Any rewrite takes over a claim it finds (a claim cannot tell a running rewrite from a
dead process's, and a rekey run again must finish a killed one), and the one taken
over conflicts at its next write. Before, the loser's retry took the claim back in
turn, knocking out the rewrite that had taken it: as long as each retried before the
other finished (a stream whose rewrite outlasts a retry) neither ever did. Now a
rewrite taken over respects the claim that took it (as an append does: until it is
gone or older than ``rewrite_claim_timeout``). The interleaving is forced by a client
that pauses each attempt at its first commit read until the other side has tried
again (no timing); before, every attempt was knocked out in turn.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConflictError
from statekeeper.records import RawSnapshot, RewriteRequest
from statekeeper.security import Keyring, generate_key, rekey

from .test_s3_rewrite_claim import _stored, _stream
from .test_s3_rewrite_prune_race import _backend, _ev, _wait, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP

#: how many attempts of each side are paused (the alternation then ends either way)
_PAUSED = 4


class _Side:
    """One rewriter (a backend of its own): its rewrite attempts counted, each paused
    once at its first commit read (after its claim) until the other side has made an
    attempt more."""

    def __init__(self, backend: S3Backend) -> None:
        self.backend = backend
        self.other: _Side | None = None
        self.attempts = 0
        self.moved = threading.Condition()
        self.paused = threading.Event()  # (set at its first pause)
        self._paused_at = 0
        self._rewriting = False
        self._done = False
        inner, rewrite = backend._s3, backend.rewrite
        side = self

        class Client:
            def __getattr__(self, name: str) -> Any:
                method = getattr(inner, name)
                if name != "get_object":
                    return method

                def call(**kwargs: Any) -> Any:
                    result = method(**kwargs)
                    if side._rewriting and "/e/" in kwargs.get("Key", ""):
                        side.pause()
                    return result

                return call

        async def counted(request: RewriteRequest) -> None:
            with self.moved:
                self.attempts += 1
                self.moved.notify_all()
            self._rewriting = True
            try:
                await rewrite(request)
            finally:
                self._rewriting = False

        backend._s3 = Client()
        backend.rewrite = counted  # type: ignore[method-assign]

    def pause(self) -> None:
        if self._paused_at == self.attempts or self.attempts > _PAUSED:
            return
        self._paused_at = self.attempts
        self.paused.set()
        other = self.other
        assert other is not None
        with other.moved:
            seen = other.attempts
            assert other.moved.wait_for(lambda: other.attempts > seen or other._done, 120)

    async def run(self, work: Any) -> None:
        """``work()``; the other side no longer waits for this one once it is done."""
        try:
            await work()
        finally:
            with self.moved:
                self._done = True
                self.moved.notify_all()


def _retried(backend: S3Backend, body: bytes) -> Any:
    """Rewrite events 2 and 4 as ``body``, retried on ConflictError at the head read
    again (as the store's rekey does), at most 500 times."""

    async def work() -> None:
        for _ in range(500):
            head, tag = await backend.head_tag("a")
            snap = RawSnapshot(4, 4.0, b"state-4-" + body, b"ssum-4-" + body)
            events = (_ev(2, body), _ev(4, body))
            try:
                await backend.rewrite(RewriteRequest("a", head, tag, events, (snap,), b"t-" + body))
                return
            except ConflictError:
                continue
        raise AssertionError("never applied")

    return work


async def test_two_rewrites_retried_at_once_both_apply(bucket: str) -> None:
    """A claims and pauses; B takes A's claim over and pauses until A tries again; A,
    taken over, conflicts and retries: it must not take B's claim back. B's first
    attempt applies, then A's retry over it (before: each attempt knocked out in turn,
    B's first among them)."""
    creator = await _stream(bucket)
    a, b = _Side(_backend(bucket)), _Side(_backend(bucket))
    a.other, b.other = b, a
    try:
        first = asyncio.create_task(a.run(_retried(a.backend, b"aaa")))
        # B starts once A holds its claim (paused at its first commit read)
        await asyncio.to_thread(_wait, a.paused)
        await asyncio.gather(b.run(_retried(b.backend, b"bbb")), first)
        assert b.attempts == 1, (a.attempts, b.attempts)  # B's first attempt applied
        events, tag, snap = await _stored(creator)
        assert [(s, p) for s, p, _ in events][1::2] == [(2, b"aaa-2"), (4, b"aaa-4")]
        assert tag == (4, b"t-aaa")
        assert snap is not None and snap.payload == b"state-4-aaa"
    finally:
        for backend in (creator, a.backend, b.backend):
            await backend.close()


async def test_two_rekeys_at_once_both_finish(bucket: str) -> None:
    """The store's own retry loop: two ``rekey`` runs of one keyed store at once (two
    processes), interleaved as above. B's first rewrite applies; A, taken over, waits
    for it and then finds nothing left to do; the stream verifies under the new key
    alone (before: each rewrite knocked out in turn)."""
    k1, k2 = generate_key(), generate_key()
    creator = _backend(bucket)
    creator._s3.create_bucket(Bucket=bucket)
    store = StateStore(creator, keyring=Keyring({"k1": k1}, active="k1"), snapshot_every=2)
    for n in range(3):
        await store.save("a", {"n": n})
    new = Keyring({"k1": k1, "k2": k2}, active="k2")
    a, b = _Side(_backend(bucket)), _Side(_backend(bucket))
    a.other, b.other = b, a
    try:
        first = asyncio.create_task(a.run(lambda: rekey(StateStore(a.backend, keyring=new))))
        await asyncio.to_thread(_wait, a.paused)
        await asyncio.gather(b.run(lambda: rekey(StateStore(b.backend, keyring=new))), first)
        assert b.attempts == 1, (a.attempts, b.attempts)
        rekeyed = StateStore(creator, keyring=Keyring({"k2": k2}, active="k2"))
        assert (await rekeyed.verify(["a"])).ok
        assert (await rekeyed.load("a")).data == {"n": 2}
    finally:
        for backend in (creator, a.backend, b.backend):
            await backend.close()
