"""The calls to S3: run on the backend's thread pool, botocore's errors told as
statekeeper's (:meth:`S3Objects._call`: credentials, timeouts, secrets scrubbed), the
bucket checked (or created) at first use, and the object operations every part
uses: list, get, head, create only if absent (a retry recognising its own write),
the cache of immutable objects, and deletes (every version on a versioned bucket)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import BackendError, BackendUnavailable, StoreClosed
from ...records import RawEvent
from ..redact import mask_url, scrub
from .base import (
    _CONDITION_FAILED,
    _NO_CREDENTIALS,
    _NOT_FOUND,
    _REFUSED,
    _WRITE,
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    T,
    _code,
    _retried,
    _token,
)
from .engine import S3Engine
from .landed import may_have_landed
from .layout import _encode_events, _shared_start

__all__ = ["S3Objects"]


def _size(value: Any) -> int:
    """Approximate bytes held by a cached value."""
    if isinstance(value, list):
        return sum(len(e.payload) + len(e.checksum) + 64 for e in value)
    if isinstance(value, tuple) and value and isinstance(value[0], bytes):
        return len(value[0]) + 64
    return 256


class S3Objects(S3Engine):
    """Calls to S3 and the object operations (a part of :class:`~.backend.S3Backend`)."""

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"s3 backend s3://{self.bucket}/{self.prefix} is closed")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        self._check_open()
        if not self._ready:
            await self._call(self._prepare)
        return await self._call(fn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            run = functools.partial(self._landed.run, fn, *args)
            return await loop.run_in_executor(self._pool, run)
        except RuntimeError as exc:  # executor shut down by close()
            if self._closed:
                raise StoreClosed("s3 backend closed during an operation") from exc
            raise
        except ClientError as exc:
            # (a write of the call answered before it: the change may stand, part-made.
            # Was: maybe_applied=False, nothing written, whatever had landed: .landed)
            landed = may_have_landed(exc)
            if _code(exc) in _REFUSED and not landed:
                raise self._credentials_error(f"refused ({_code(exc)})") from None
            said = self._said(exc)
            cause = exc if said == str(exc) else None  # (chained only when it quotes no secret)
            if landed:
                said += " (part-way: a write of this operation may have landed before it)"
            raise BackendError(f"{self._where()}: {said}", maybe_applied=landed) from cause
        except _NO_CREDENTIALS as exc:  # nothing was sent: no request can be signed
            raise self._credentials_error(f"not found ({exc})") from None
        except BotoCoreError as exc:
            said = self._said(exc)  # (chained only when it quotes no secret)
            raise BackendError(f"{self._where()}: {said}", maybe_applied=True) from (
                exc if said == str(exc) else None
            )

    def _said(self, exc: BaseException) -> str:
        """botocore's message without the endpoint's password: a timeout or SSL error
        quotes the endpoint URL whole (``Read timeout on endpoint URL: "http://user:
        password@minio:9000/..."``)."""
        return scrub(str(exc), self.endpoint_url) if self.endpoint_url else str(exc)

    def _where(self) -> str:
        where = f" at {mask_url(self.endpoint_url)}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def _credentials_error(self, what: str) -> BackendUnavailable:
        """What a user must do when S3 will not take (or never got) credentials: the
        error names the bucket and the URL, never a secret."""
        return BackendUnavailable(
            f"{self._where()}: AWS credentials {what}: give credentials that may use "
            f"bucket {self.bucket!r} (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, ~/.aws/credentials or an instance role)"
        )

    def _prepare(self) -> None:
        if self._ready:
            return
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            # (the first contact: the server cannot be reached at all; nothing was sent)
            raise BackendUnavailable(
                f"{self._where()}: cannot connect to the S3 endpoint ({type(exc).__name__},"
                f" connect_timeout={self.connect_timeout:g} s)"
            ) from None
        except ReadTimeoutError:
            # (the first contact, a read: it connects and never answers; nothing written)
            raise BackendUnavailable(
                f"{self._where()}: the S3 endpoint accepted the connection and did not"
                f" answer within read_timeout={self.read_timeout:g} s (4 attempts)"
            ) from None
        except ClientError as exc:
            if _code(exc) not in _NOT_FOUND | {"NoSuchBucket"}:
                raise
            if not self.create_bucket:
                fix = (
                    ""
                    if self.readonly
                    else ": create it, or open the store with create_bucket=True "
                    "(?create_bucket=1 in the URL)"
                )
                raise BackendUnavailable(
                    f"{self._where()}: bucket {self.bucket!r} does not exist{fix}"
                ) from None
            try:
                self._s3.create_bucket(Bucket=self.bucket)
            except ClientError as again:
                if _code(again) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        self._ready = True

    def _list(self, prefix: str, start_after: str | None = None) -> list[str]:
        return [key for key, _ in self._list_tagged(prefix, start_after)]

    def _list_tagged(self, prefix: str, start_after: str | None = None) -> list[tuple[str, str]]:
        """(key, version tag) of every object under ``prefix``, in key order. The tag
        (ETag + LastModified) changes whenever the object is written again."""
        keys: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                keys.append((obj["Key"], f"{obj.get('ETag', '')}@{obj.get('LastModified', '')}"))
            if not page.get("IsTruncated"):
                return keys
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)

    def _cached(self, key: str, tag: str, load: Callable[[], T]) -> T:
        """``load()`` once per (key, tag); later calls come from memory (LRU, bounded
        by ``cache_bytes`` of payload)."""
        if self._cache_bytes <= 0:
            return load()
        with self._cache_lock:
            hit = self._cache.get((key, tag))
            if hit is not None:
                self._cache.move_to_end((key, tag))
                return hit[0]  # type: ignore[no-any-return]
        value = load()
        size = _size(value)
        with self._cache_lock:
            if (key, tag) not in self._cache and size <= self._cache_bytes // 4:
                self._cache[(key, tag)] = (value, size)
                self._cached_bytes += size
                while self._cached_bytes > self._cache_bytes:
                    _, (_, dropped) = self._cache.popitem(last=False)
                    self._cached_bytes -= dropped
        return value

    def _get(self, key: str) -> tuple[bytes, dict[str, str]] | None:
        obj = self._object(self._s3.get_object, key)
        return None if obj is None else (obj["Body"].read(), dict(obj.get("Metadata", {})))

    def _head_meta(self, key: str) -> dict[str, str] | None:
        obj = self._object(self._s3.head_object, key)
        return None if obj is None else dict(obj.get("Metadata", {}))

    def _object(self, call: Callable[..., dict[str, Any]], key: str) -> dict[str, Any] | None:
        """``call(Bucket=, Key=key)`` (a GET or HEAD of the object); None when there is no
        such object."""
        try:
            return call(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise

    def _put_new(self, key: str, body: bytes, metadata: dict[str, str] | None = None) -> bool:
        """Create ``key`` only if it does not exist. False if it already did (made by
        someone else: a retry meeting the object its own lost try wrote is True). The
        write's own token (:data:`_WRITE`) is the one in ``metadata``, or a new one."""
        token = (metadata or {}).get(_WRITE) or _token()
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                Metadata={**(metadata or {}), _WRITE: token},
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED:
                return self._ours(exc, key, token)
            raise
        return True

    def _put_if_match(
        self, key: str, events: Sequence[RawEvent], metadata: dict[str, str], etag: str
    ) -> ClientError | None:
        """Write ``events`` over the commit object ``key`` only while it is still the
        object read with ``etag`` (``If-Match``), under a new write token (set in
        ``metadata`` as :data:`_WRITE`). None when written; S3's refusal when the object
        changed since (:meth:`_ours` with ``metadata[_WRITE]`` tells a retry that met its
        own lost try's write)."""
        metadata[_WRITE] = token = _token()
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=_encode_events(events, token),
                Metadata=metadata,
                IfMatch=etag,
            )
        except ClientError as exc:
            if _code(exc) not in _CONDITION_FAILED:
                raise
            return exc
        return None

    def _delete_if_match(self, key: str, etag: str) -> bool:
        """Delete ``key`` only while it is still the object read with ``etag``
        (``If-Match``). False when it changed since (what was written meanwhile is
        kept); True when it was deleted, or was gone already."""
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=key, IfMatch=etag)
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED:
                return False
            if _code(exc) not in _NOT_FOUND:
                raise
        return True

    def _ours(self, exc: ClientError, key: str, token: str) -> bool:
        """Whether the refusal ``exc`` of a conditional write of ``key`` (made with
        ``token``) met the object an earlier try of the same write made: botocore sends
        a request again when its reply was lost (a connection closed, a timeout), and
        the retry then finds the first try's object. Only a retried request is looked at
        (one HEAD)."""
        if not _retried(exc):
            return False
        meta = self._head_meta(key)
        return meta is not None and meta.get(_WRITE) == token

    def _versioned(self) -> bool:
        """Whether the bucket keeps older versions (versioning enabled or suspended, an
        object lock): asked once per backend, at its first delete."""
        if self._versioning is None:
            try:
                reply = self._s3.get_bucket_versioning(Bucket=self.bucket)
            except ClientError as exc:
                if _code(exc) not in ("AccessDenied", "NotImplemented"):
                    raise
                # (not allowed to ask: plain deletes, as on a bucket never versioned)
                reply = {}
            self._versioning = reply.get("Status") in ("Enabled", "Suspended")
        return self._versioning

    def _delete_keys(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` in their order, 1,000 per request; on a versioned bucket every
        version of each (a plain delete there only adds a delete marker): the older
        versions first, each key's current one (version or delete marker) after all of
        them — deleting a current version makes the next older one current, so an erase
        cut short there served an overwritten record (a commit from before a rekey, in
        clear) or an earlier incarnation's object as the agent's."""
        if keys and self._versioned():
            older, current = self._versions_of(keys)
            self._delete_objects(older)
            self._delete_objects(current)
        else:
            self._delete_objects([{"Key": k} for k in keys])

    def _drop_older_versions(self, keys: Sequence[str]) -> None:
        """On a versioned bucket, delete every version of ``keys`` but the current one:
        an overwrite (a rewrite's commits and snapshots: rekey, a schema migration)
        keeps the bytes it replaced as an older version, readable by anyone allowed to
        list versions — a store encrypted by ``rekey`` kept every record in clear."""
        if keys and self._versioned():
            self._delete_objects(self._versions_of(keys)[0])

    def _versions_of(
        self, keys: Sequence[str]
    ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        """Every version and delete marker of ``keys`` (one listing of their common
        prefix): those that are not current, then the current one of each in the keys'
        order (a key with none listed: deleted plainly)."""
        wanted = set(keys)
        older: list[dict[str, str]] = []
        current: dict[str, dict[str, str]] = {}
        pages = self._s3.get_paginator("list_object_versions").paginate(
            Bucket=self.bucket, Prefix=_shared_start(keys)
        )
        for page in pages:
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if v["Key"] in wanted:
                    entry = {"Key": v["Key"], "VersionId": v["VersionId"]}
                    if v.get("IsLatest"):
                        current[v["Key"]] = entry
                    else:
                        older.append(entry)
        return older, [current.get(k, {"Key": k}) for k in keys]

    def _delete_objects(self, objects: Sequence[dict[str, str]]) -> None:
        for i in range(0, len(objects), 1000):
            reply = self._s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": list(objects[i : i + 1000]), "Quiet": True},
            )
            # S3 answers 200 with the keys it did not delete (AccessDenied, object lock...)
            if errors := reply.get("Errors"):
                first = errors[0]
                raise BackendError(
                    f"{self._where()}: S3 did not delete {len(errors)} object(s), e.g."
                    f" {first.get('Key')!r}: {first.get('Code')} ({first.get('Message')})",
                    maybe_applied=True,
                )
