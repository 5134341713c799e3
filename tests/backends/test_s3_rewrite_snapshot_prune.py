"""A rewrite on S3 carrying a snapshot below the base of a prune that lands between its
check of the base and its write of that snapshot.

The rewrite refuses a snapshot below the stream's base (``pruned_snapshots``), from the
commits it listed; S3 has no atomic step over the listing and its writes, and a prune
ignores a rewrite's claim. A prune that switched the base and deleted the snapshots
below it between the two had the rewrite write the snapshot back: an object of the
pruned state (maybe personal data retention removed) stored again below the base,
hidden from reads, kept until a later prune of the agent. Now the rewrite lists the
commits once more after its writes and deletes each snapshot it wrote below the base
then: a prune whose switch that listing misses listed the snapshots after the write
(it switches before it lists them), and deletes it itself. Real moto S3 server; the
prune is run inside the rewrite's write of the snapshot (no timing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot, RewriteRequest

from ._services import moto_endpoint, s3_credentials
from .test_s3 import _bucket_name, _drop_bucket
from .test_s3_rewrite_prune_race import _Hooked

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


@pytest.fixture
def bucket(tmp_path: Path) -> Any:
    moto_endpoint()
    name = _bucket_name(tmp_path)
    yield name
    _drop_bucket(name)


def _ev(seq: int, body: bytes = b"old") -> RawEvent:
    return RawEvent(seq, "step", float(seq), body + b"-%d" % seq, body + b"-sum-%d" % seq)


async def test_a_prune_between_the_check_and_the_snapshot_write(bucket: str) -> None:
    backend = S3Backend(
        bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    pruner = S3Backend(bucket, "agents", endpoint_url=moto_endpoint(), **s3_credentials())
    try:
        snap2 = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
        snap3 = RawSnapshot(3, 3.0, b"state-3", b"ssum-3")
        await backend.append(AppendRequest("a", 0, (_ev(1), _ev(2)), snapshot=snap2))
        await backend.append(AppendRequest("a", 2, (_ev(3),), snapshot=snap3))
        await backend.append(AppendRequest("a", 3, (_ev(4), _ev(5)), head_tag=b"t5"))
        root = backend._agent_root("a") + "s/"
        hooked = _Hooked(backend._s3)
        backend._s3 = hooked
        pruned: list[bool] = []

        def prune() -> None:  # the retention prune, whole, before the snapshot at 2 lands
            pruner._prune_sync("a", 3, ())
            pruned.append(True)

        hooked.hooks.append(("put_object", lambda kw: kw.get("Key") == root + "2".zfill(20), prune))
        new2 = RawSnapshot(2, 2.0, b"state-2 back", b"ssum-2'")
        new3 = RawSnapshot(3, 3.0, b"state-3 new", b"ssum-3'")
        request = RewriteRequest("a", 5, b"t5", (_ev(4, b"new"),), (new3, new2), b"t5'")
        await backend.rewrite(request)  # (serialised before the prune: it went on)
        assert pruned
        stored = sorted(
            o["Key"][len(root) :]
            for o in backend._s3.list_objects_v2(Bucket=bucket, Prefix=root).get("Contents", ())
        )
        assert stored == ["3".zfill(20)]  # the pruned state is not stored again
        assert await backend.latest_snapshot("a", 3) == new3
        assert [e.seq for e in await backend.read("a")] == [4, 5]
        assert (await backend.read("a"))[0] == _ev(4, b"new")
        assert await backend.head_tag("a") == (5, b"t5'")
    finally:
        await backend.close()
        await pruner.close()
