"""Prunes: the part of the commit spanning the new base copied into a commit of its own
(copied again when a rewrite changed it meanwhile), the switch in one object write
(the base object), and what it hides deleted after."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ..base import check_prune, check_prune_at
from .base import _MARK_TRIES, _WRITE, _version
from .engine import S3Engine
from .layout import _BASE_RECORD, _decode_events, _encode_events

__all__ = ["S3Prune"]


class S3Prune(S3Engine):
    """Prunes (a part of :class:`~.backend.S3Backend`)."""

    def _prune_sync(self, agent_id: str, base_seq: int, drop: tuple[int, ...]) -> None:
        layout, meta = self._tip_layout(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        stored = self._latest_sync(agent_id, base_seq) if 0 < base_seq < head else None
        current = max(layout.base, layout.commits[0][0] - 1 if layout.commits else 0)
        has_base = stored is not None and stored.seq == base_seq
        check_prune(agent_id, head, base_seq, has_base, drop, current)
        commits = [c for c, _ in layout.commits]
        root = self._agent_root(agent_id)
        if base_seq >= commits[0]:
            # 1. the events after the base in a commit of their own (reads end each commit
            #    where the next one begins: the stream reads the same)
            at = max(i for i, c in enumerate(commits) if c <= base_seq + 1)
            if commits[at] != base_seq + 1:
                self._split(agent_id, commits, at, base_seq, head)
            # 2. the switch, in one object write: what lies at or below it is gone
            self._put_new(root + "e/b" + self._seq_name(base_seq), b"")
            layout = self._layout(agent_id)
        # 3. what the base hides (this prune's, or one interrupted before), and snapshots
        drop_keys: list[str] = []  # (idempotency keys stay: a retry still finds its append)
        floor = max(base_seq, layout.commits[0][0] - 1 if layout.commits else 0)
        named = set(drop)
        for key in self._list(root + "s/"):
            seq = int(key[len(root) + 2 :])
            if seq < floor or seq in named:
                drop_keys.append(key)
        # the hidden commits last: a prune killed before them leaves them listed for the
        # next one, which finds their idempotency keys through them
        self._delete_keys(drop_keys)
        self._delete_keys(layout.hidden)

    def _split(self, agent_id: str, commits: list[int], at: int, base_seq: int, head: int) -> None:
        """Write the events after ``base_seq`` of the commit ``commits[at]`` spanning it as
        the commit ``base_seq + 1`` (same metadata, plus the first seq of the append
        its idempotency key covers)."""
        root = self._agent_root(agent_id) + "e/"
        obj = self._s3.get_object(Bucket=self.bucket, Key=root + self._seq_name(commits[at]))
        end = commits[at + 1] - 1 if at + 1 < len(commits) else head
        events = [
            e
            for e in _decode_events(agent_id, obj["Body"].read())
            if base_seq < e.seq <= end and e.type != _BASE_RECORD
        ]
        metadata = dict(obj.get("Metadata", {}))
        metadata.setdefault("first", str(commits[at]))
        metadata.pop(_WRITE, None)  # (the copy's write is its own)
        self._put_new(root + self._seq_name(base_seq + 1), _encode_events(events), metadata)
        self._copy_again(agent_id, commits[at], obj, base_seq, end)

    def _copy_again(
        self, agent_id: str, first: int, obj: dict[str, Any], base_seq: int, end: int
    ) -> None:
        """After :meth:`_split` made its copy (the commit ``base_seq + 1``) of the commit
        ``first`` read as ``obj``: a rewrite of that commit in between (a rekey, a
        migration, a redaction: new records, a new head tag) lived on only in the commit
        the base hides, the rewrite answered success. The commit is read again until it
        is the one copied; when it changed, the copy is made again from it, ``If-Match``
        on the copy as read (a rewrite that listed the copy and rewrote it itself is
        never overwritten). A rewrite after this check finds the copy when it lists the
        commits again (:meth:`_rewrite_copies`)."""
        root = self._agent_root(agent_id) + "e/"
        key, copy = root + self._seq_name(first), root + self._seq_name(base_seq + 1)
        for _ in range(_MARK_TRIES):
            now = self._object(self._s3.head_object, key)
            if now is None or _version(now) == _version(obj):
                return
            obj = self._object(self._s3.get_object, key) or {}
            held = self._object(self._s3.get_object, copy)
            if not obj or held is None:
                return  # (deleted: the prune finished by another)
            events = [
                e
                for e in _decode_events(agent_id, obj["Body"].read())
                if base_seq < e.seq <= end and e.type != _BASE_RECORD
            ]
            metadata = dict(obj.get("Metadata", {}))
            metadata.setdefault("first", str(first))
            self._put_if_match(copy, events, metadata, held["ETag"])  # (refused: read again)
        # (rewritten again and again under the prune: nothing switched yet, retried whole)
        raise ConflictError(agent_id, end, self._head_sync(agent_id))

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history below ``base_seq`` (see :meth:`Backend.prune`). Switched by one
        object write (the base object); the deletions follow it, and an interrupted
        prune's are finished by the next one (see the module documentation). The head
        and its event's checksum, when given, are compared just before (S3 has no
        atomic step spanning the check and the switch: a stream deleted and made again
        within those requests is not caught)."""
        self._check_can_write()
        if head is not None or checksum is not None:
            current = await self.head(agent_id)
            stored = None
            if checksum is not None and current == head:
                stored = await self.head_checksum(agent_id, current)
            check_prune_at(agent_id, current, head, checksum, lambda: stored)
        await self._run(self._prune_sync, agent_id, base_seq, tuple(drop_snapshots))
