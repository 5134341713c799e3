"""The store's own objects: its marker (``statekeeper init``; a read-only opening checks
it is a store), the store-level markers (``m/<hex name>``) and the store's id
(``statekeeper.id``), made once, after a check that the server honours conditional
creates."""

from __future__ import annotations

import secrets

from ...errors import BackendError, BackendRejected, NotAStore, ReadOnlyStore
from .base import _CONDITION_FAILED, _MARK_TRIES, _NOT_FOUND, ClientError, _code, _commit_lock
from .engine import S3Engine

__all__ = ["S3Store"]


class S3Store(S3Engine):
    """The store's marker, markers and id (a part of :class:`~.backend.S3Backend`)."""

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore(f"s3://{self.bucket}/{self.prefix} is open read-only")

    def _is_store(self) -> bool:
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND | {"NoSuchBucket"}:
                return False
            raise
        if self._head_meta(self._marker) is not None:
            return True
        page = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=self._root, MaxKeys=1)
        return bool(page.get("Contents"))

    async def ensure_store(self) -> None:
        self._check_open()
        if not await self._call(self._is_store):
            raise NotAStore(
                f"s3://{self.bucket}/{self.prefix}",
                "it holds no statekeeper data (no bucket, or nothing under the prefix); "
                "run `statekeeper init URL` to create one",
            )

    async def initialize(self) -> None:
        """Create the bucket if ``create_bucket`` and write the store's marker object."""
        self._check_writable()
        await self._run(self._put_new, self._marker, b"statekeeper")

    def _marker_key(self, name: str) -> str:
        return self._markers + name.encode().hex()

    async def read_marker(self, name: str) -> bool | None:
        """Whether the marker object ``<prefix>/m/<hex name>`` exists (one HEAD)."""
        return await self._run(self._head_meta, self._marker_key(name)) is not None

    async def set_marker(self, name: str) -> None:
        """Create the marker object (a conditional PUT: one that exists stays as it is)."""
        self._check_writable()
        await self._run(self._put_new, self._marker_key(name), b"1")

    async def feed_id(self) -> str | None:
        """The store's id, 16 hex digits in ``<prefix>/statekeeper.id``: the key family of
        its agents' data keys in a key vault shared with other stores
        (:mod:`statekeeper.codec.keyscope`; without it an S3 store used the id-only key,
        and a ``forget`` in any store of the vault shredded the same id here). Made by
        the first call (a conditional PUT: two processes opening a new store agree on
        it); a read-only store without one has none (None). S3 keeps no change feed
        (no capability ``FEED``): nothing else reads it here."""
        return await self._run(self._store_id_sync, False)

    async def renew_feed_id(self) -> str | None:
        """Give the store a fresh id (a restore into it), durably; returns it."""
        self._check_writable()
        return await self._run(self._store_id_sync, True)

    def _store_id_sync(self, renew: bool) -> str | None:
        with _commit_lock(self.bucket, self.prefix, "statekeeper.id"):
            for _ in range(_MARK_TRIES):
                obj = self._object(self._s3.get_object, self._id_key)
                if obj is not None and not renew:
                    return self._id_of(obj["Body"].read())
                if obj is None and self.readonly:
                    return None
                if obj is None:
                    self._check_conditional_create()
                made = secrets.token_hex(8)
                if obj is None:
                    if not self._put_new(self._id_key, made.encode()):
                        continue  # another process made it first: read it
                else:
                    try:
                        self._s3.put_object(
                            Bucket=self.bucket,
                            Key=self._id_key,
                            Body=made.encode(),
                            IfMatch=obj["ETag"],
                        )
                    except ClientError as exc:
                        if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                            raise
                        continue  # renewed by another meanwhile: again
                # read back (a server checking If-None-Match loosely: the stored one)
                found = self._object(self._s3.get_object, self._id_key)
                return made if found is None else self._id_of(found["Body"].read())
        raise BackendError(
            f"{self._where()}: the store's id ({self._id_key}) kept changing", maybe_applied=True
        )

    def _check_conditional_create(self) -> None:
        """Before this store's id is made: that the server refuses a conditional create
        (``If-None-Match: *``) of an object that exists (a probe object next to the id,
        created twice, then deleted). A server that ignores the condition (older MinIO
        or Ceph, some gateways) lets two processes opening a new store each make an id
        — the last PUT stays, but the first process keeps the id it made and read back
        — and seal their agents with two key families; refused with
        :class:`~statekeeper.errors.BackendRejected`, before the id is written."""
        probe = f"{self._id_key}.check-{secrets.token_hex(8)}"
        # (a first create refused — credentials that may not write here — made nothing:
        # no delete, which such credentials are refused too, hiding why in its error)
        if not self._put_new(probe, b"1"):  # (a probe name nobody else uses)
            return
        try:
            ignored = self._put_new(probe, b"2")
        finally:
            self._delete_keys([probe])
        if ignored:
            raise BackendRejected(
                f"{self._where()}: the S3 server ignores If-None-Match (a conditional"
                " create of an object that exists succeeded): two processes opening this"
                " new store could each make a store id of their own, and appends could"
                " overwrite each other. Use a server that honours conditional writes"
                " (AWS S3, current MinIO or Ceph RGW), or S3 only as a tiered store's cold"
                " tier; nothing was written"
            )

    def _id_of(self, body: bytes) -> str:
        text = body.decode("ascii", "replace").strip()
        if len(text) != 16 or any(c not in "0123456789abcdef" for c in text):
            raise BackendError(f"{self._where()}: {self._id_key} is not a store id (16 hex digits)")
        return text
