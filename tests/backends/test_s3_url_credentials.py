"""An s3:// URL with credentials in it (``s3://KEY:SECRET@bucket/prefix``) is refused,
naming neither: they were read as the bucket's name and shown in reprs and errors."""

from __future__ import annotations

import pytest

pytest.importorskip("boto3")

from statekeeper.backends import open_backend
from statekeeper.backends.s3 import S3Backend
from statekeeper.errors import ConfigurationError


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIAEXAMPLE:supersecret@bucket/p",
        "s3://supersecret@bucket/p?endpoint_url=http://127.0.0.1:9",
    ],
)
def test_credentials_in_an_s3_url_are_refused_unshown(url: str) -> None:
    for opening in (S3Backend.from_url, open_backend):
        # was: S3Backend('AKIAEXAMPLE:supersecret@bucket', ...), and at the first call a
        # BackendError "s3://AKIAEXAMPLE:supersecret@bucket/p: ... Invalid bucket name"
        with pytest.raises(ConfigurationError, match="takes no credentials") as info:
            opening(url)
        assert "supersecret" not in str(info.value)
        assert "AKIAEXAMPLE" not in str(info.value)
        assert "s3://…@bucket/p" in str(info.value)


@pytest.mark.parametrize("kind", ["ReadTimeoutError", "ConnectTimeoutError", "SSLError"])
def test_a_botocore_error_quoting_the_endpoint_hides_its_password(kind: str) -> None:
    """A timeout or SSL failure after the first contact (botocore's message quotes the
    endpoint URL whole: 'Read timeout on endpoint URL: "http://minio:SECRET@…"') was
    raised as BackendError with the password in its message and its cause."""
    import asyncio
    import traceback

    import botocore.exceptions  # type: ignore[import-untyped]

    from statekeeper.errors import BackendError

    secret = "minio-Pw-Tq84Vz"
    endpoint = f"http://minio:{secret}@127.0.0.1:9000"
    backend = S3Backend.from_url(f"s3://bucket/p?endpoint_url={endpoint}")
    error = getattr(botocore.exceptions, kind)
    raised = error(endpoint_url=f"{endpoint}/bucket/p/x", error="refused")
    assert secret in str(raised)

    def fails() -> None:
        raise raised

    async def main() -> None:
        try:
            with pytest.raises(BackendError) as info:
                await backend._call(fails)
        finally:
            await backend.close()
        shown = "".join(traceback.format_exception(info.value))
        assert secret not in shown, shown
        assert "minio:***@127.0.0.1:9000" in str(info.value)

    asyncio.run(main())


@pytest.mark.parametrize(
    "endpoint", ["minio:{pw}@127.0.0.1:9000", "http://minio:{pw}@bad host:9000"]
)
def test_an_endpoint_boto3_refuses_is_named_without_its_password(endpoint: str) -> None:
    """boto3 refuses a malformed endpoint with 'Invalid endpoint: <the URL>': the
    ConfigurationError quoted it whole (and chained boto3's error), password and all —
    for a store's URL and for a backup's S3 location alike."""
    import traceback

    from statekeeper.backends.s3 import object_client

    secret = "minio-Pw-Ld53Xc"
    given = endpoint.format(pw=secret)
    for build in (lambda: open_backend(f"s3://bucket/p?endpoint_url={given}"),
                  lambda: object_client(given)):  # fmt: skip
        with pytest.raises(ConfigurationError, match="Invalid endpoint") as info:
            build()
        assert secret not in "".join(traceback.format_exception(info.value))
