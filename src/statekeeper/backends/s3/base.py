"""What every part of the S3 backend stands on: the driver (boto3, botocore: imported
here, with the ``s3`` extra's message when missing), the metadata names and answers
the parts share (a write's token :data:`_WRITE`, an incarnation :data:`_INC`, a
rewrite's claim :data:`_REWRITING`...), botocore's answers read (:func:`_code`,
:func:`_retried`), the per-process lock of an agent's commit PUTs
(:func:`_commit_lock`) and a rewrite's signal to list again (:class:`_Relist`)."""

from __future__ import annotations

import secrets
import threading
import weakref
from typing import Any, TypeVar

from ...errors import BackendUnavailable, ConfigurationError, StatekeeperError

try:
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]
    from botocore.exceptions import (  # type: ignore[import-untyped]
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        CredentialRetrievalError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailable("the S3 backend needs boto3: pip install 'statekeeper[s3]'") from exc

#: (what the other parts take from here besides the private names: the driver's)
__all__ = [
    "MAX_KEY_BYTES",
    "BotoCoreError",
    "ClientError",
    "Config",
    "ConnectTimeoutError",
    "CredentialRetrievalError",
    "EndpointConnectionError",
    "NoCredentialsError",
    "PartialCredentialsError",
    "ReadTimeoutError",
    "T",
    "boto3",
]

T = TypeVar("T")

_CONDITION_FAILED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
#: the metadata naming the write that made an object (a token of its own): a retried
#: conditional write whose first try's reply was lost recognises its own object by it
_WRITE = "w"
#: what S3 answers to credentials it does not accept (a HEAD has no body: a bare 403)
_REFUSED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "403",
}
_NO_CREDENTIALS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)
#: the metadata naming a stream's incarnation: a random id chosen by the append that
#: creates the stream (the first after its absence), carried by each of its commits,
#: snapshots, key objects and its mark; a stream written before it has none
_INC = "inc"
#: set (by the reader, never stored) on the metadata of a stream's newest commit when a
#: delete's claim lies over it that names another incarnation: a stray claim
_STRAY = "stray"
#: an agent's high-water mark (under its root): overwritten after each commit with the
#: stream's incarnation and head, so a newest commit deleted by something else (its head
#: gone back, the next save reusing its seqs) is told from a stream that never got further
_MARK = "h/mark"
#: conditional PUTs of a high-water mark other writers keep moving, before giving up
_MARK_TRIES = 16
#: the longest object key S3 takes, in UTF-8 bytes (AWS answers KeyTooLongError above;
#: MinIO, Ceph and moto may take more, but a store must move to AWS unchanged)
MAX_KEY_BYTES = 1024
#: the parts of an agent's root that are the store's: commits, mark, snapshots, keys
_AGENT_PARTS = ("e/", "h/", "s/", "k/")
#: the metadata marking a rewrite's claim (an empty commit at the slot the next append
#: would take, held for the rewrite's duration): the digest of the rewrite's request
_REWRITING = "rw"

# Commit PUTs of one agent are made one at a time per process: it saves requests that
# would lose anyway, and some S3 emulators (moto) check If-None-Match non-atomically.
_commit_locks: weakref.WeakValueDictionary[tuple[str, str, str], threading.Lock] = (
    weakref.WeakValueDictionary()
)
_commit_locks_guard = threading.Lock()


def _commit_lock(*key: str) -> threading.Lock:
    with _commit_locks_guard:
        lock = _commit_locks.get(key)  # type: ignore[arg-type]
        if lock is None:
            lock = threading.Lock()
            _commit_locks[key] = lock  # type: ignore[index]
        return lock


class _Relist(StatekeeperError):
    """A rewrite met a commit it listed deleted (a prune's): it is made again from a new
    listing (:meth:`S3Backend._rewrite_sync`)."""


def _version(obj: dict[str, Any]) -> tuple[str, str | None]:
    """What tells one write of an object from another: its ETag (its body's digest) and
    the token of the write (:data:`_WRITE`, in its metadata): a rewrite of the head tag
    alone keeps the body, hence the ETag."""
    return obj.get("ETag", ""), dict(obj.get("Metadata", {})).get(_WRITE)


def _token() -> str:
    """A write's own token, stored in its object's metadata (:data:`_WRITE`)."""
    return secrets.token_hex(8)


def _retried(exc: ClientError) -> bool:
    """Whether botocore's answer ``exc`` came to a request it had sent more than once."""
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code", "")) or str(
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def _seconds(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise ConfigurationError(f"{name} must be a number of seconds > 0, not {value!r}")
    return float(value)
