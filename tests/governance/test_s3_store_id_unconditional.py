"""An S3 server that ignores ``If-None-Match`` (older MinIO or Ceph, some gateways):
two processes opening a new S3 store each made a store id — both conditional creates
"succeeded", the last one stayed, but the first process had read its own back and kept
it — so they sealed the same store's agents with two key families (a forget through
one missed the keys the other made, an export named a family the store no longer has).
Making the id now first checks that the server refuses a conditional create of an
object that exists, and refuses (``BackendRejected``, nothing written) when it does not.
A server honouring the condition (moto, here) is not refused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.s3 import store as s3_store
from statekeeper.errors import BackendRejected

from ..backends._services import drop_bucket, namespace, s3_url

pytestmark = pytest.mark.slow  # (moto S3)


@contextmanager
def _bucket(tmp_path: Path) -> Iterator[str]:
    bucket = namespace(tmp_path).replace("_", "-")
    try:
        yield bucket
    finally:
        drop_bucket(bucket)


def _ignoring_if_none_match(backend: S3Backend) -> None:
    """The backend's client talks to a server that ignores ``If-None-Match``."""
    put = backend._s3.put_object

    def unconditional(**kwargs: Any) -> Any:
        kwargs.pop("IfNoneMatch", None)
        return put(**kwargs)

    backend._s3.put_object = unconditional


async def test_two_first_opens_on_a_server_ignoring_if_none_match_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two processes: the per-process lock around the id's creation is not shared
    monkeypatch.setattr(s3_store, "_commit_lock", lambda *key: threading.Lock())
    with _bucket(tmp_path) as bucket:
        url = s3_url(bucket)
        first, second = S3Backend.from_url(url), S3Backend.from_url(url)
        try:
            await first.health()
            await second.health()
            for backend in (first, second):
                _ignoring_if_none_match(backend)
            # both read no id, then each made one: the first read its own back before
            # the second's PUT replaced it (was: two ids, 'a…' and 'b…')
            real = second._object
            made: list[str | None] = []

            def read_before_the_first_made_it(call: Any, key: str) -> Any:
                if key == second._id_key and not made:
                    try:
                        made.append(first._store_id_sync(False))
                    except BackendRejected:
                        made.append(None)
                    return None
                return real(call, key)

            second._object = read_before_the_first_made_it  # type: ignore[method-assign]
            with pytest.raises(BackendRejected, match="ignores If-None-Match"):
                await second.feed_id()
            assert made == [None]  # the first was refused too
            # nothing written: no id, no probe left behind
            listed = first._s3.list_objects_v2(Bucket=bucket)
            assert [o["Key"] for o in listed.get("Contents", [])] == []
        finally:
            await first.close()
            await second.close()


async def test_a_server_honouring_it_makes_one_id(tmp_path: Path) -> None:
    with _bucket(tmp_path) as bucket:
        url = s3_url(bucket)
        a, b = S3Backend.from_url(url), S3Backend.from_url(url)
        try:
            ids = await asyncio.gather(a.feed_id(), b.feed_id())
            assert ids[0] is not None and ids[0] == ids[1]
            listed = a._s3.list_objects_v2(Bucket=bucket)
            keys = [o["Key"] for o in listed.get("Contents", [])]
            assert not [k for k in keys if ".check-" in k], keys  # the probe is gone
        finally:
            await a.close()
            await b.close()


async def test_credentials_that_may_not_write_are_named_as_such(tmp_path: Path) -> None:
    # a prefix the credentials may read but not write (nor delete in): the first open
    # of a new store is refused for its credentials, as before the probe — not with the
    # probe's clean-up refused ("S3 did not delete 1 object(s)"), which hid why
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    from statekeeper.errors import BackendUnavailable

    with _bucket(tmp_path) as bucket:
        backend = S3Backend.from_url(s3_url(bucket))
        try:
            await backend.health()

            def refused(**kwargs: Any) -> Any:
                error = {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}
                raise ClientError(error, "PutObject")

            def not_deleted(**kwargs: Any) -> Any:
                objects = kwargs["Delete"]["Objects"]
                return {
                    "Errors": [
                        {"Key": o["Key"], "Code": "AccessDenied", "Message": "Access Denied"}
                        for o in objects
                    ]
                }

            backend._s3.put_object = refused
            backend._s3.delete_objects = not_deleted
            with pytest.raises(BackendUnavailable, match=r"refused \(AccessDenied\)"):
                await backend.feed_id()  # was: BackendError "S3 did not delete 1 object(s)"
        finally:
            await backend.close()
