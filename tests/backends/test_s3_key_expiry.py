"""S3's ``expire_keys``: a key object written before records carried their time (no
``created`` metadata) is timed by its ``LastModified``; the newest commit's key, which
a lookup also finds in the commit, is marked expired so that the next append does not
write it back (what it does for a key object a crashed append left unwritten), and a
later append with that key is recorded again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper.records import AppendResult
from statekeeper.testing import request

from .test_s3 import _bucket_name, _client, bucket, make_s3

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP

__all__ = ["bucket"]


async def test_a_key_object_without_its_time_is_timed_by_last_modified(
    tmp_path: Path, bucket: str
) -> None:
    backend = make_s3(tmp_path)
    try:
        await backend.append(request("a", 0, key="old", timestamp=time.time()))
        await backend.append(request("a", 1))  # (the newest commit: no key)
        root = backend._agent_root("a") + "k/" + backend._key_hash("old")
        s3 = _client()
        body = s3.get_object(Bucket=_bucket_name(tmp_path), Key=root)["Body"].read()  # type: ignore[attr-defined]
        s3.put_object(Bucket=_bucket_name(tmp_path), Key=root, Body=body)  # type: ignore[attr-defined]
        # (as written before: no metadata; its LastModified is now)
        assert await backend.expire_keys("a", time.time() - 3600) == 0
        assert await backend.expire_keys("a", time.time() + 3600, count_only=True) == 1
        assert await backend.expire_keys("a", time.time() + 3600) == 1
        assert await backend.lookup_key("a", "old") is None
    finally:
        await backend.close()


async def test_the_newest_commits_key_stays_expired(tmp_path: Path, bucket: str) -> None:
    backend = make_s3(tmp_path)
    try:
        await backend.append(request("a", 0, key="tip", timestamp=time.time()))
        assert await backend.expire_keys(None, time.time() + 3600) == 1
        assert await backend.lookup_key("a", "tip") is None
        assert await backend.idempotency_keys("a") == []
        # the next append writes no key object back for the newest commit's key
        await backend.append(request("a", 1, timestamp=time.time()))
        assert await backend.lookup_key("a", "tip") is None
        assert await backend.idempotency_keys("a") == []
        # the mark goes once another commit is the newest
        assert await backend.expire_keys("a", time.time() + 3600) == 0
        assert backend._list(backend._agent_root("a") + "k/") == []
        # a retry with the key is a new append, recorded (and a retry of it a duplicate)
        again = await backend.append(request("a", 2, key="tip", timestamp=time.time()))
        assert again == AppendResult("a", 3, 3)
        assert await backend.append(request("a", 2, key="tip")) == AppendResult("a", 3, 3, True)
        assert await backend.idempotency_keys("a") == [("tip", 3, 3)]
        # expired while newest, then used again at once: recorded over its mark
        assert await backend.expire_keys("a", time.time() + 3600) == 1
        assert await backend.append(request("a", 3, key="tip")) == AppendResult("a", 4, 4)
        assert await backend.lookup_key("a", "tip") == AppendResult("a", 4, 4, True)
    finally:
        await backend.close()
