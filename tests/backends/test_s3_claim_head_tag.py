"""A rewrite on S3 that wrote its newest commit (its new records and head tag, its last
write) and died before deleting its claim: the stream's head tag must be the one of the
commit it reads.

The claim (an empty commit at ``head + 1``) copies the newest commit's metadata, head
tag included, when it is made. Readers took the head and head tag from the newest
object listed — the claim — so until the claim went (a take-over, or an append past
``rewrite_claim_timeout``, 600 s) they were served the tag from before the rewrite
with the records after it: a keyed store's load and verify raised ``IntegrityError``
(the head tag does not authenticate the head record), and appends conflicted. Now a
claim's head tag is read from the commit under it, and the rewrite names its claim on
that commit: an append meeting the claim of a finished rewrite deletes it and lands.
Real moto S3 server; the process is "killed" by an exception
injected after the write (no timing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.s3 import base as s3_base
from statekeeper.backends.s3 import claims as s3_claims
from statekeeper.records import AppendRequest
from statekeeper.security import Keyring, generate_key, rekey

from .test_s3_rewrite_claim import _After, _rewrite, _stored, _stream
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


class _Killed(Exception):
    """The process running the rewrite dies here."""


def _newest_written(newest: int) -> Any:
    """The rewrite's write of the commit ``newest`` (a conditional overwrite)."""
    first = _commit(newest)
    return lambda kw: first(kw) and "IfMatch" in kw


async def _killed_after(
    bucket: str, newest: int, run: Callable[[S3Backend], Awaitable[Any]]
) -> None:
    """``run`` (a rewrite) on a backend of its own, killed right after it wrote the
    commit ``newest`` (the stream's newest: its last write): its claim is left."""
    dying = _backend(bucket)
    hooked = _After(dying._s3)
    dying._s3 = hooked

    def die() -> None:
        raise _Killed

    hooked.after.append(("put_object", _newest_written(newest), die))
    dying._release_rewrite = lambda key, token: None  # type: ignore[method-assign]
    try:
        with pytest.raises(_Killed):
            await run(dying)
        dying._s3 = hooked.inner
        tip = await dying._run(lambda: dying._tip_layout("a", check=False))
        assert tip[1] is not None and tip[1].get("rw")  # the dead rewrite's claim
    finally:
        await dying.close()


async def test_the_head_tag_is_the_newest_commits_under_a_dead_claim(bucket: str) -> None:
    """Commits 1-2 and 3-4 (head tag t4), a rewrite of events 2 and 4 and the head tag
    (t4') killed after writing commit 3: the records read are the rewrite's, and so is
    the head tag (was: (4, t4), the claim's copy, until the claim went); the next
    append deletes the claim and lands."""
    creator = await _stream(bucket)
    try:
        await _killed_after(bucket, 3, lambda dying: dying.rewrite(_rewrite(b"new", b"t4'")))
        events, tag, snap = await _stored(creator)
        assert [(s, p) for s, p, _ in events][1::2] == [(2, b"new-2"), (4, b"new-4")]
        assert tag == (4, b"t4'")
        assert snap is not None and snap.payload == b"state-4-new"
        # its claim lies over a finished rewrite: an append deletes it and lands (was:
        # ConflictError until the claim was older than rewrite_claim_timeout)
        await creator.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        assert await creator.head_tag("a") == (5, b"t5")
        assert [first for first in await creator._run(creator._commits, "a")] == [1, 3, 5]
    finally:
        await creator.close()


async def test_a_rekey_killed_after_its_last_write_loads_and_verifies(bucket: str) -> None:
    """A keyed store's rekey killed after writing the newest commit (its last write: every
    record and snapshot re-encrypted, the head tag made with the new key): with the old
    key retired, load and verify read the stream (were: IntegrityError, the claim's
    head tag made with the retired key); a rekey run again finishes (the claim goes)
    and saves land."""
    backend = _backend(bucket)
    backend._s3.create_bucket(Bucket=bucket)
    k1, k2 = generate_key(), generate_key()
    old = Keyring({"k1": k1}, active="k1")
    try:
        store = StateStore(backend, keyring=old, snapshot_every=2)
        for n in range(3):
            await store.save("a", {"n": n})
        newest = (await backend._run(backend._commits, "a"))[-1]
        new = Keyring({"k1": k1, "k2": k2}, active="k2")
        await _killed_after(bucket, newest, lambda dying: rekey(StateStore(dying, keyring=new)))
        # every record and snapshot is under k2 now: k1 retired, the stream still reads
        store = StateStore(backend, keyring=Keyring({"k2": k2}, active="k2"))
        assert (await store.load("a")).data == {"n": 2}
        report = await store.verify(["a"])
        assert report.ok, report
        await rekey(store)  # (nothing left to do)
        await store.save("a", {"n": 10})
        assert (await store.verify(["a"])).ok
        assert (await store.load("a")).data == {"n": 10}
    finally:
        await backend.close()


def test_the_claim_module_reads_the_backends_metadata_names() -> None:
    assert (s3_claims._TOKEN, s3_claims._REWRITING) == (s3_base._WRITE, s3_base._REWRITING)
