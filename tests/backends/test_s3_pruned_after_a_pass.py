"""An S3 rewrite whose first pass over the commits landed writes (a commit rewritten,
its snapshot written) before a prune removed the newest commit it listed: it lists
again, and the second pass finds a record it rewrites below the new base — refused
(``RewriteBelowPrunedBase``: planned before the prune, planned again it applies).

Was: that refusal said what every engine's says, that nothing of the rewrite was
written, though the first pass's writes stood (the snapshot it wrote above the base,
new bytes). Now it says so: ``maybe_applied`` and "part-way" (still the same error:
rekey and migrate plan it again). One refused before any write says nothing landed.
Real moto S3 server; the prune runs inside the rewrite's read of the newest commit
(no timing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3 import _bucket_name, _drop_bucket
from .test_s3_rewrite_prune_race import _commit, _Hooked

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


@pytest.fixture
def bucket(tmp_path: Path) -> Any:
    moto_endpoint()
    name = _bucket_name(tmp_path)
    yield name
    _drop_bucket(name)


def _ev(seq: int, body: bytes = b"old") -> RawEvent:
    return RawEvent(seq, "step", float(seq), body + b"-%d" % seq, body + b"-sum-%d" % seq)


@pytest.mark.parametrize("after_a_pass", [True, False], ids=["after-a-pass", "before"])
async def test_a_refusal_after_a_pass_that_landed_writes_says_so(
    bucket: str, after_a_pass: bool
) -> None:
    backend = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    pruner = S3Backend(bucket, "agents", endpoint_url=moto_endpoint(), **s3_credentials())
    try:
        await backend.append(AppendRequest("a", 0, (_ev(1), _ev(2))))
        await backend.append(AppendRequest("a", 2, (_ev(3), _ev(4))))
        await backend.append(AppendRequest("a", 4, (_ev(5), _ev(6))))
        await backend.save_snapshot("a", RawSnapshot(5, 5.0, b"state-5", b"ssum-5"))
        if not after_a_pass:
            await pruner.prune("a", 5)
        hooked = _Hooked(backend._s3)
        backend._s3 = hooked
        # the retention prune at 5, whole, when the rewrite reads the newest commit it
        # listed (commit 3-4 rewritten, the snapshot at 6 written): that commit is gone
        hooked.hooks.append(("get_object", _commit(5), lambda: pruner._prune_sync("a", 5, ())))
        new6 = RawSnapshot(6, 6.0, b"state-6 new", b"ssum-6'")
        request = RewriteRequest("a", 6, None, (_ev(3, b"new"), _ev(6, b"new")), (new6,))
        with pytest.raises(RewriteBelowPrunedBase) as refused:
            await backend.rewrite(request)
        backend._s3 = hooked.inner
        assert (await backend.read("a"))[0].seq == 6  # (pruned at 5)
        if after_a_pass:
            assert await backend.latest_snapshot("a") == new6  # (the first pass's: stands)
            assert getattr(refused.value, "maybe_applied", False)  # was: not said
            assert "part-way" in str(refused.value)
        else:
            assert await backend.latest_snapshot("a", 6) != new6
            assert not getattr(refused.value, "maybe_applied", False)
            assert "part-way" not in str(refused.value)
    finally:
        await backend.close()
        await pruner.close()
