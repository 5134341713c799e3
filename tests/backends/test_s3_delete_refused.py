"""DeleteObjects answers 200 and lists the keys S3 did not delete (AccessDenied, an
object lock): a delete that left objects behind is a BackendError, not a success."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import BackendError
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_a_delete_s3_refused_for_a_key_is_an_error(bucket: str) -> None:
    store = S3Backend(
        bucket, "p", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    refused: list[str] = []

    def refuse_one(parsed: dict[str, Any], **_: Any) -> None:
        # the reply S3 gives for a key a bucket policy keeps (moto enforces no policy:
        # only the reply is changed here): the request a success, the key in Errors
        refused.append(key := f"p/a/{b'x'.hex()}/e/{1:020d}")
        parsed["Errors"] = [{"Key": key, "Code": "AccessDenied", "Message": "Access Denied"}]

    try:
        await store.append(request("x", 0, 2, key="k"))
        store._s3.meta.events.register("after-call.s3.DeleteObjects", refuse_one)
        # was: True, as if every object of the agent were gone
        with pytest.raises(BackendError, match="did not delete 1 object") as info:
            await store.delete_agent("x")
        assert info.value.maybe_applied is True
        assert refused
    finally:
        await store.close()
