"""Appends: a commit object created only if absent at the slot after the head
(compare-and-append), its idempotency key, snapshot and the high-water mark written
after it; and the first append of a stream compacted at a base (``append_from_base``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from urllib.parse import quote, unquote

from ...errors import ConflictError
from ...records import AppendRequest, AppendResult, RawEvent, RawSnapshot, StreamChange
from ..base import KeptKeys, validate_from_base, validate_from_base_guard, validate_request
from .base import _INC, _REWRITING, _STRAY, _commit_lock, _token
from .claims import FINISHED
from .engine import S3Engine
from .layout import _BASE_RECORD, _EXPIRED, _encode_events, _key_body, _key_range, _Layout

__all__ = ["S3Appends"]


class S3Appends(S3Engine):
    """Appends (a part of :class:`~.backend.S3Backend`)."""

    def _append_sync(self, request: AppendRequest, base: RawSnapshot | None = None) -> AppendResult:
        """One append; with ``base``, the first one of a stream compacted at it (the
        agent must not exist; the base snapshot is written inside the commit)."""
        agent_id, key = request.agent_id, request.idempotency_key
        root = self._agent_root(agent_id)
        first, last = request.events[0].seq, request.events[-1].seq
        key_hash = self._key_hash(key) if key is not None else None
        expired = False  # the key's record expired: its append is not the retry's
        stale = False  # the key object is a deleted incarnation's (written over)
        checked: tuple[_Layout, dict[str, str] | None] | None = None
        if key_hash is not None:
            found = self._get(root + "k/" + key_hash)
            expired = found is not None and found[0] == _EXPIRED
            if found is not None and not expired:  # (kept when a prune removed its events)
                a, b = _key_range(found[0])
                made_by = found[1].get(_INC)
                if made_by is None:  # (written before incarnations, or kept by a restore)
                    return AppendResult(agent_id, a, b, duplicate=True)
                # a record of this stream only: the stream is read (raising when it lost
                # its newest commits: the record's append may be among them)
                checked = self._tip_layout(agent_id)
                if checked[1] is not None and checked[1].get(_INC) == made_by:
                    return AppendResult(agent_id, a, b, duplicate=True)
                stale = True  # a late write of a deleted stream's append: not this one's
        layout, meta = checked if checked is not None else self._tip_layout(agent_id)
        commits = [c for c, _ in layout.commits]
        if meta is not None:
            previous = meta.get("key")
            if previous is not None:
                if previous == key_hash and not expired:
                    return AppendResult(
                        agent_id, self._tip_first(commits, meta), int(meta["last"]), True
                    )
                # the key object of the newest commit may be missing after a crash
                # (an expired one holds its mark: not written back)
                name = unquote(meta.get("keyname", ""))
                self._put_new(
                    root + "k/" + previous,
                    _key_body(self._tip_first(commits, meta), int(meta["last"]), name or None),
                    {"created": meta.get("updated", "")},
                )
        head = int(meta["last"]) if meta is not None else 0
        if meta is not None and meta.get(_STRAY):  # a claim made for another incarnation
            self._withdraw_claim(agent_id, head)  # (its process may have died: see there)
        if meta is not None and meta.get("tomb"):  # a delete_agent_at claimed the stream
            self._finish_delete(agent_id)  # (its process may have died before the rest)
            layout, meta = self._tip_layout(agent_id)
            commits = [c for c, _ in layout.commits]
            head = int(meta["last"]) if meta is not None else 0
        if head != (0 if base is not None else request.expected_seq):
            raise ConflictError(agent_id, request.expected_seq, head)
        if meta is None and layout.hidden:  # a deleted stream's base: not this one's
            self._delete_keys(layout.hidden)
        created = meta["created"] if meta is not None else repr(request.events[0].timestamp)
        # the stream's incarnation: a new one for a new stream (or one written before
        # incarnations existed: from here on its lost newest commits are told)
        inc = (meta.get(_INC) if meta is not None else None) or _token()
        metadata = {
            "last": str(last),
            "created": created,
            "updated": repr(request.events[-1].timestamp),
            _INC: inc,
        }
        if request.head_tag is not None:  # the authenticated head travels with the commit
            metadata["headtag"] = request.head_tag.hex()
        if key is not None and key_hash is not None:
            metadata["key"] = key_hash
            quoted = quote(key, safe="")
            if len(quoted) <= 1024:  # S3 metadata is ASCII and at most 2 KB
                metadata["keyname"] = quoted
        records: Sequence[RawEvent] = request.events
        if base is not None:
            record = RawEvent(base.seq, _BASE_RECORD, base.timestamp, base.payload, base.checksum)
            records = (record, *request.events)
        body = _encode_events(records)
        commit_key = root + "e/" + self._seq_name(first)
        with _commit_lock(self.endpoint_url or "", self.bucket, commit_key):
            won = self._put_new(commit_key, body, metadata)
            # (a rewrite's claim older than the bound: its process died; broken, as the
            # rewrite, if it still runs, finds before its next write)
            if not won and self._break_stale_claim(commit_key, (meta or {}).get(FINISHED)):
                won = self._put_new(commit_key, body, metadata)
        if not won:  # another writer's commit (equal bytes too: ours bears our token)
            stored = self._head_meta(commit_key)
            if (
                key_hash is not None
                and stored is not None
                and stored.get("key") == key_hash
                and not stored.get(_REWRITING)  # (a rewrite's claim bears the tip's key)
            ):
                return AppendResult(agent_id, first, int(stored["last"]), True)
            raise self._conflict(agent_id, request.expected_seq, stored)
        # the high-water mark, before anything else that follows the commit (a process
        # dying before it only leaves the mark behind the stream: nothing is told then)
        self._raise_mark(root, inc, last)
        if base is not None:  # a copy: the commit holds the base already
            self._put_snapshot(agent_id, base, inc)
        if key_hash is not None:
            body = _key_body(first, last, key)
            made = {"created": repr(request.events[0].timestamp), _INC: inc}
            if expired or stale:  # over the mark of the expired record (or another's)
                self._s3.put_object(
                    Bucket=self.bucket, Key=root + "k/" + key_hash, Body=body, Metadata=made
                )
            else:
                self._put_new(root + "k/" + key_hash, body, made)
        if request.snapshot is not None:
            self._put_snapshot(agent_id, request.snapshot, inc)
        return AppendResult(agent_id, first, last)

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        self.refuse_fence(request)
        return await self._run(self._append_sync, request)

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        return await super().append_batch(requests)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """Create a stream compacted at ``base`` in one object write: its first commit,
        created only if absent (as every commit), holds the base snapshot too
        (``raise_floor``: no change feed here, nothing to raise; a ``guard`` refused:
        one object write takes no other stream's check)."""
        self._check_can_write()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        return await self._run(self._from_base_sync, request, base, tuple(kept_keys))

    def _from_base_sync(
        self, request: AppendRequest, base: RawSnapshot, kept_keys: KeptKeys
    ) -> AppendResult:
        # the kept keys first: alone (the commit refused, or never made) they are
        # found by no lookup, as a lookup of a stream that does not exist finds nothing
        root = self._agent_root(request.agent_id)
        if kept_keys and self._tip(request.agent_id)[1] is None:
            made = {"created": repr(time.time())}  # (stored now: their appends are gone)
            for name, first, last in kept_keys:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=root + "k/" + self._key_hash(name),
                    Body=_key_body(first, last, name),
                    Metadata=made,
                )
        return self._append_sync(request, base)
