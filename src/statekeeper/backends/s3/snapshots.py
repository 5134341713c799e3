"""Snapshots: written as objects of their own (``s/<seq>``, marked with their stream's
incarnation) and read back (the newest at or below a seq, not below the base; a
compacted stream's base snapshot from its first commit when its object is missing)."""

from __future__ import annotations

from ...errors import ConflictError
from ...records import RawSnapshot
from ..framing import pack_snapshot, unpack_snapshot
from .base import _INC
from .engine import S3Engine
from .layout import _BASE_RECORD, _decode_events

__all__ = ["S3Snapshots"]


class S3Snapshots(S3Engine):
    """Snapshots written and read (a part of :class:`~.backend.S3Backend`)."""

    def _snapshot_key(self, agent_id: str, seq: int) -> str:
        return self._agent_root(agent_id) + "s/" + self._seq_name(seq)

    def _put_snapshot(self, agent_id: str, snapshot: RawSnapshot, inc: str | None) -> None:
        """Write a snapshot object, marked with the incarnation ``inc`` of its stream."""
        self._s3.put_object(
            Bucket=self.bucket,
            Key=self._snapshot_key(agent_id, snapshot.seq),
            Body=pack_snapshot(snapshot),
            Metadata={_INC: inc} if inc else {},
        )

    def _save_snapshot_sync(self, agent_id: str, snapshot: RawSnapshot) -> None:
        _, meta = self._tip(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        if not 0 < snapshot.seq <= head:
            raise ConflictError(agent_id, snapshot.seq, head)
        self._put_snapshot(agent_id, snapshot, meta.get(_INC) if meta is not None else None)

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        await self._run(self._save_snapshot_sync, agent_id, snapshot)

    def _latest_sync(self, agent_id: str, at_or_below: int | None) -> RawSnapshot | None:
        root = self._agent_root(agent_id) + "s/"
        snaps = sorted((int(k[len(root) :]), tag) for k, tag in self._list_tagged(root))
        # below the base there is no state to go back to (a snapshot there is left by an
        # interrupted prune); the newest snapshot is never below it
        base = self._base_sync(agent_id) if at_or_below is not None else 0
        for seq, tag in reversed(snaps):
            if at_or_below is not None and seq > at_or_below:
                continue
            if seq < base:
                break
            key = root + self._seq_name(seq)
            found = self._cached(key, tag, lambda key=key: self._get(key))  # type: ignore[misc]
            if found is None:
                continue
            blob = found[0]
            return unpack_snapshot(seq, blob)
        return self._base_in_commit(agent_id, at_or_below)

    def _base_in_commit(self, agent_id: str, at_or_below: int | None) -> RawSnapshot | None:
        """The base snapshot a stream made by :meth:`append_from_base` holds in its first
        commit (its own object is written after the commit: a kill may come between)."""
        commits = self._commits(agent_id)
        if (
            not commits
            or commits[0] == 1
            or (at_or_below is not None and at_or_below < commits[0] - 1)
        ):
            return None
        found = self._get(self._agent_root(agent_id) + "e/" + self._seq_name(commits[0]))
        records = _decode_events(agent_id, found[0]) if found is not None else []
        if not records or records[0].type != _BASE_RECORD:
            return None
        e = records[0]
        return RawSnapshot(e.seq, e.timestamp, e.payload, e.checksum)

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        return await self._run(self._latest_sync, agent_id, at_or_below)
