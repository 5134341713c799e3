"""A rewrite taken over on S3 respects its taker's claim (``TakenBy``: until it is gone
or older than ``rewrite_claim_timeout``), but not a taker that finished: one that wrote
the newest commit (its last write, its claim's token on it) and died before deleting
its claim. Appends delete such a claim at once; the taken-over process's next rewrite
conflicted until the claim was 600 s old (nothing else could clear it for that
process but an append). Now it takes the finished claim over, as any rewrite does.
Real moto S3 server; the taker runs inside the first rewrite's commit read (no timing).
"""

from __future__ import annotations

import pytest

pytest.importorskip("boto3")

from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RewriteRequest

from .test_s3_rewrite_claim import _After, _rewrite, _stored, _stream
from .test_s3_rewrite_prune_race import _backend, _commit, _ev, bucket

__all__ = ["bucket"]

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_a_rewrite_taken_over_by_a_finished_dead_taker_applies(bucket: str) -> None:
    """X claims and reads commit 1; B (another process) takes X's claim over, rewrites
    everything and dies before deleting its claim; X conflicts. X's retry at the new
    head tag applies (was: ConflictError until B's claim was older than the bound)."""
    creator = await _stream(bucket)
    x, taker = _backend(bucket), _backend(bucket)
    try:
        hooked = _After(x._s3)
        x._s3 = hooked
        taker._release_rewrite = lambda key, token: None  # type: ignore[method-assign]
        hooked.after.append(
            ("get_object", _commit(1), lambda: taker._rewrite_sync(_rewrite(b"bbb", b"tB")))
        )
        with pytest.raises(ConflictError):
            await x.rewrite(_rewrite(b"xxx", b"tX"))
        x._s3 = hooked.inner
        assert await x.head_tag("a") == (4, b"tB")  # B's, finished: its claim is left
        tip = await x._run(lambda: x._tip_layout("a", check=False))
        assert tip[1] is not None and tip[1].get("rw")
        retry = RewriteRequest("a", 4, b"tB", (_ev(2, b"xxx"),), head_tag=b"tX")
        await x.rewrite(retry)
        events, tag, _ = await _stored(creator)
        assert [(s, p) for s, p, _ in events][1::2] == [(2, b"xxx-2"), (4, b"bbb-4")]
        assert tag == (4, b"tX")
        await creator.append(AppendRequest("a", 4, (_ev(5),), head_tag=b"t5"))
        assert await creator.head_tag("a") == (5, b"t5")
    finally:
        for backend in (creator, x, taker):
            await backend.close()
