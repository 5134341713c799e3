"""The inspector on an S3 agent whose newest commit something else deleted (h/s3incarn:
reading it raises IntegrityError naming the lost seqs). Its page was a 500 error page
with no delete form, though ``statekeeper delete`` can delete it (h/review9): nothing
in the inspector could acknowledge the loss. It is shown as a lost agent is, with the
lost page's delete form, which deletes it while its head is still lost."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]

from statekeeper import SyncStateStore

from ..backends._services import drop_bucket, moto_endpoint, s3_credentials, s3_url
from .conftest import make_client

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


@pytest.fixture
def url() -> Iterator[str]:
    bucket = "inslosttip-" + uuid.uuid4().hex[:16]
    url = s3_url(bucket)
    with SyncStateStore(url) as store:
        for n in range(3):
            store.save("x", {"n": n})
        store.save("y", {"n": 1})
    client = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
    client.delete_object(Bucket=bucket, Key=f"agents/a/{b'x'.hex()}/e/{3:020d}")
    yield url
    drop_bucket(bucket)


def _form(page: str) -> dict[str, str]:
    form = html.unescape(page.split('action="/agent/delete"', 1)[1].split("</form>", 1)[0])
    return dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))


def test_its_page_offers_the_lost_agents_delete(url: str) -> None:
    client: Any
    with make_client(url, allow_writes=True) as client:
        page = client.get("/agent?id=x")
        assert page.status_code == 410, page.text[:600]
        text = html.unescape(page.text)
        assert "lost its newest records" in text and "events 3..3 are missing" in text
        fields = _form(page.text)
        assert fields["lost"] == "1" and fields["id"] == "x"
        assert client.get("/agent?id=y").status_code == 200  # the others are unharmed
        done = client.post("/agent/delete", data={**fields, "confirm": "x"})
        assert done.status_code == 200 and "was deleted" in done.text, done.text[:600]
    with SyncStateStore(url) as store:
        assert store.head("x") == 0
        store.save("x", {"again": 1})  # its id can be used again
        assert [i.agent_id for i in store.list_agents()] == ["x", "y"]


def test_one_whose_head_reads_again_is_not_deleted_by_the_form(url: str) -> None:
    client: Any
    with make_client(url, allow_writes=True) as client:
        fields = _form(client.get("/agent?id=x").text)
        with SyncStateStore(url) as other:  # another process: deleted, made again
            other.delete("x")
            other.save("x", {"new": 1})
        r = client.post("/agent/delete", data={**fields, "confirm": "x"})
        assert r.status_code == 409, r.text[:600]
    with SyncStateStore(url) as store:
        assert store.load("x").data == {"new": 1}
