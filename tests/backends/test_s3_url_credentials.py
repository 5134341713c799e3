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
