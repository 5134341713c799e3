"""One S3 agent whose newest commit something else deleted (h/s3incarn: reading its
head is an IntegrityError) is that agent's problem, not every other agent's: a store
opened without a key reads the heads of a few agents before its first write (are
they encrypted? ``store/keyguard.py``), and that read raised the lost agent's error
into the save of any other agent — no save of any agent could start in a new
process while the lost agent was among the first listed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper import SyncStateStore
from statekeeper.errors import IntegrityError

from ._services import drop_bucket, moto_endpoint, s3_credentials, s3_url

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


@pytest.fixture
def url() -> Iterator[str]:
    bucket = "lostothers-" + uuid.uuid4().hex[:16]
    yield s3_url(bucket)
    drop_bucket(bucket)


def test_another_agent_is_saved_in_a_new_store(url: str) -> None:
    with SyncStateStore(url) as store:
        for n in range(3):
            store.save("a-lost", {"n": n})
        store.save("b", {"n": 1})
    bucket = url.split("/")[2]
    client = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
    client.delete_object(Bucket=bucket, Key=f"agents/a/{b'a-lost'.hex()}/e/{3:020d}")
    with SyncStateStore(url) as store:  # a new process: its first write
        store.save("b", {"n": 2})
        store.save("c", {"n": 1})
        assert store.load("b").data == {"n": 2} and store.head("c") == 1
        with pytest.raises(IntegrityError, match=r"events 3\.\.3 are missing"):
            store.save("a-lost", {"n": 99})  # (the lost agent itself still raises)
