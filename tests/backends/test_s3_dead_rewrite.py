"""A rekey on S3 whose process dies after claiming the stream (an exception injected
after the claim and the first commit's rewrite): its claim stays. Before, every append
to the agent (and ``delete_agent_at``) conflicted until "the same request" came again,
and a rekey run again is not the same request (fresh nonces): the agent stayed
unwritable for good. Now a rekey run again takes the claim over and finishes; an
append meeting a claim older than ``rewrite_claim_timeout`` (the clock injected, never
slept) deletes it and lands; either way the stream verifies. Real moto S3 server."""

from __future__ import annotations

import pytest

pytest.importorskip("boto3")

from collections.abc import Awaitable, Callable
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawEvent, RewriteRequest
from statekeeper.security import Keyring, generate_key, rekey

from .test_s3_rewrite_claim import _After
from .test_s3_rewrite_prune_race import _backend, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _Killed(Exception):
    """The process running the rekey dies here."""


async def _saved(bucket: str) -> S3Backend:
    """Agent ``a``: three commits, a snapshot, in clear."""
    backend = _backend(bucket)
    backend._s3.create_bucket(Bucket=bucket)
    plain = StateStore(backend, snapshot_every=2)
    for n in range(3):
        await plain.save("a", {"n": n})
    return backend


async def _killed(bucket: str, run: Callable[[S3Backend], Awaitable[Any]]) -> None:
    """``run`` (a rewrite) on a backend of its own, killed after its claim and its
    rewrite of the first commit: its claim is left; appends at the head conflict."""
    dying = _backend(bucket)
    hooked = _After(dying._s3)
    dying._s3 = hooked

    def die() -> None:
        raise _Killed

    # (after its first commit write: the first put_object after the claim's)
    hooked.after.append(("put_object", lambda kw: "/e/" in kw["Key"] and "IfMatch" in kw, die))
    dying._release_rewrite = lambda key, token: None  # type: ignore[method-assign]
    with pytest.raises(_Killed):
        await run(dying)
    dying._s3 = hooked.inner
    head = await dying.head("a")
    tip = await dying._run(lambda: dying._tip_layout("a", check=False))
    assert tip[1] is not None and tip[1].get("rw")  # the dead rewrite's claim
    with pytest.raises(ConflictError):  # (young: it could be a running rewrite's)
        await dying.append(AppendRequest("a", head, (RawEvent(head + 1, "x", 0.0, b"", b""),)))
    await dying.close()


async def test_a_rekey_run_again_finishes_a_dead_ones(bucket: str) -> None:
    """A rekey killed after its claim, run again: it takes the claim over (another
    request: fresh nonces) and finishes; the stream verifies and takes saves."""
    backend = await _saved(bucket)
    keyring = Keyring({"k1": generate_key()})
    try:
        await _killed(bucket, lambda dying: rekey(StateStore(dying, keyring=keyring)))
        store = StateStore(backend, keyring=keyring)
        await rekey(store)  # was: ConflictError for ever (another request's claim)
        await store.save("a", {"n": 10})
        await _verified(store)
    finally:
        await backend.close()


async def test_an_append_after_the_bound_breaks_a_dead_claim(bucket: str) -> None:
    """A rewrite killed after its claim (its records the same bytes: the stream stays
    loadable as it was), then a save whose clock is past ``rewrite_claim_timeout``:
    it deletes the claim and lands; the stream verifies."""
    backend = await _saved(bucket)

    async def rewrite(dying: S3Backend) -> None:
        head, tag = await dying.head_tag("a")
        events = tuple(await dying.read("a"))
        await dying.rewrite(RewriteRequest("a", head, tag, events, head_tag=tag))

    try:
        await _killed(bucket, rewrite)
        now = backend._clock()
        backend._clock = lambda: now + backend.rewrite_claim_timeout + 1
        store = StateStore(backend)
        await store.save("a", {"n": 10})  # was: ConflictError until the agent was deleted
        await _verified(store)
    finally:
        await backend.close()


async def _verified(store: StateStore) -> None:
    report = await store.verify(["a"])
    assert report.ok, report
    assert (await store.load("a")).data == {"n": 10}
