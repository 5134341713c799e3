"""Whole objects for the tools that store them (backups: :mod:`statekeeper.governance.backup`):
a plain client (:func:`object_client`) and a conditional upload (:func:`upload_new`),
here so that only the S3 engine imports the driver."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from ..redact import scrub
from .base import _CONDITION_FAILED, _WRITE, BotoCoreError, ClientError, _code, _token, boto3

__all__ = ["object_client", "upload_new"]


def upload_new(client: Any, fileobj: Any, bucket: str, key: str, *, replace: bool) -> bool:
    """Upload ``fileobj`` to ``bucket``/``key`` with ``client`` (from :func:`object_client`),
    in parts when large. Unless ``replace``, the write itself is conditional
    (``IfNoneMatch='*'`` on the ``PutObject`` or ``CompleteMultipartUpload`` that makes the
    object appear): False, nothing written, when ``key`` exists already — also when it
    appeared after any look the caller took first. Other errors are botocore's."""
    from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]

    token = _token()
    if not replace:  # s3transfer takes no IfNoneMatch in ExtraArgs: added to its calls

        def only_new(params: dict[str, Any], **_: Any) -> None:
            params["IfNoneMatch"] = "*"

        for operation in ("PutObject", "CompleteMultipartUpload"):
            client.meta.events.register(f"before-parameter-build.s3.{operation}", only_new)
    try:  # the classic transfer manager: the CRT one builds its requests without those events
        client.upload_fileobj(
            fileobj,
            bucket,
            key,
            # the upload's token: a retry whose first try's reply was lost finds it
            ExtraArgs={"Metadata": {_WRITE: token}},
            Config=TransferConfig(preferred_transfer_client="classic"),
        )
    except ClientError as exc:  # a failed multipart upload is aborted by s3transfer
        if not replace and _code(exc) in _CONDITION_FAILED:
            try:
                found = client.head_object(Bucket=bucket, Key=key).get("Metadata", {})
            except ClientError:
                return False
            return bool(found.get(_WRITE) == token)
        raise
    return True


def object_client(endpoint_url: str | None = None, region_name: str | None = None) -> Any:
    """A plain boto3 S3 client (for tools that store whole objects, such as backups),
    built here so that only the S3 engine imports the driver."""
    try:
        return boto3.client("s3", endpoint_url=endpoint_url, region_name=region_name)
    except (BotoCoreError, ValueError) as exc:  # ("Invalid endpoint: <the URL>")
        said = scrub(str(exc), endpoint_url) if endpoint_url else str(exc)
        raise ConfigurationError(f"cannot build an S3 client: {said}") from None
