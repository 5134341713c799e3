"""An agent's stream as its objects say: the live commits (one listing), the newest
commit's metadata (head, head tag, key; a claim over it read through), and the check
that no newest commit was lost (the high-water mark ``h/mark`` and newer snapshots of
the same incarnation), with the mark moved up after each commit."""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import IntegrityError
from .base import (
    _CONDITION_FAILED,
    _INC,
    _MARK,
    _MARK_TRIES,
    _NOT_FOUND,
    _REWRITING,
    _STRAY,
    ClientError,
    _code,
)
from .claims import tip_under_claim
from .engine import S3Engine
from .layout import _Layout, _layout_of

__all__ = ["S3Stream"]


class S3Stream(S3Engine):
    """The stream's commits, tip and high-water mark (a part of :class:`~.backend.S3Backend`)."""

    def _commits(self, agent_id: str) -> list[int]:
        """First seqs of the agent's live commits, ascending."""
        return [first for first, _ in self._commits_tagged(agent_id)]

    def _commits_tagged(self, agent_id: str) -> list[tuple[int, str]]:
        return self._layout(agent_id).commits

    def _layout(self, agent_id: str) -> _Layout:
        root = self._agent_root(agent_id) + "e/"
        return _layout_of(root, self._list_tagged(root))

    def _tip_layout(
        self, agent_id: str, *, check: bool = True
    ) -> tuple[_Layout, dict[str, str] | None]:
        """The stream and its newest commit's metadata. With ``check``, a stream whose
        newest commits something else deleted raises :class:`IntegrityError` (see
        :meth:`_reached`) instead of reading as a stream that never got further."""
        layout, meta = self._tip_read(agent_id)
        inc = meta.get(_INC) if meta is not None else None
        if not check or meta is None or inc is None:  # (a stream from before incarnations)
            return layout, meta
        reached, proof = self._reached(agent_id, inc, int(meta["last"]))
        if reached <= int(meta["last"]):
            return layout, meta
        # Read after the proof (written after its commit), the stream must reach it: a
        # commit that landed between the first reading and the proof's does now.
        layout, meta = self._tip_read(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        if meta is not None and meta.get(_INC) == inc and head < reached:
            raise IntegrityError(
                agent_id,
                head + 1,
                f"events {head + 1}..{reached} are missing ({proof} of this stream,"
                f" incarnation {inc}, says it reached seq {reached}): its newest S3 commit"
                " object(s) were deleted by something other than this store; its head"
                f" would go back to {head} and the next save reuse seq {head + 1}",
            )
        return layout, meta

    def _reached(self, agent_id: str, inc: str, head: int) -> tuple[int, str]:
        """The highest seq an object written after a commit of the incarnation ``inc``
        says the stream reached, and which object: the high-water mark (one HEAD);
        when it is not at ``head`` or beyond (missing, another incarnation's, behind: a
        process died before writing it), the newest snapshot of ``inc`` above ``head``
        (one listing, of what lies above ``head`` only). A snapshot or mark of another
        incarnation is a deleted stream's leftover (a late write of its last append):
        not this stream's evidence."""
        root = self._agent_root(agent_id)
        found_mark = self._object(self._s3.head_object, root + _MARK)
        mark = dict(found_mark.get("Metadata", {})) if found_mark is not None else None
        # (what an append of this thread moves it up from: see _raise_mark)
        self._seen_mark.value = (root, found_mark["ETag"] if found_mark else None, mark)
        if mark is not None and mark.get(_INC) == inc:
            reached = int(mark.get("last") or 0)
            if reached >= head:
                return reached, "its high-water mark h/mark"
        above = self._list(root + "s/", start_after=root + "s/" + self._seq_name(head))
        for key in reversed(above):
            found = self._head_meta(key)
            if found is not None and found.get(_INC) == inc:
                seq = int(key[len(root) + 2 :])
                return seq, f"its snapshot at seq {seq}"
        return head, ""

    def _raise_mark(self, root: str, inc: str, last: int) -> None:
        """Move the high-water mark of the stream at ``root`` (incarnation ``inc``) up to
        ``last``, never down: a PUT conditional on the mark read before (``If-Match``
        its ETag: the body names incarnation and seq, so each mark's ETag is its own;
        ``If-None-Match`` when there was none). Another writer's mark landing first (a
        later commit's) is kept: this one's, late, would have taken it back, and a loss
        of that later commit then went untold. The mark this thread's head check read
        is the first guess (no request more); a refused PUT reads it again."""
        seen = getattr(self._seen_mark, "value", None)
        self._seen_mark.value = None
        known = seen[1:] if seen is not None and seen[0] == root else None
        key = root + _MARK
        for _ in range(_MARK_TRIES):
            if known is None:
                obj = self._object(self._s3.head_object, key)
                known = (obj["ETag"], dict(obj.get("Metadata", {}))) if obj else (None, None)
            etag, meta = known
            if meta is not None and meta.get(_INC) == inc and int(meta.get("last") or 0) >= last:
                return  # at this seq or beyond it already (a later commit's mark)
            condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
            try:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=f"{inc}:{last}".encode(),
                    Metadata={_INC: inc, "last": str(last)},
                    **condition,
                )
                return
            except ClientError as exc:
                if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                    raise
                known = None  # moved meanwhile (or a retry of this PUT landed): again

    def _tip_read(self, agent_id: str) -> tuple[_Layout, dict[str, str] | None]:
        layout = self._layout(agent_id)
        if not layout.commits:
            return layout, None
        key = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-1][0])
        # Not cached: an object's metadata (head tag, key name) is not part of its ETag, and
        # a stream deleted and re-created with the same bytes within LastModified's one
        # second would be served the old incarnation's head tag.
        meta = self._head_meta(key)
        if meta is None:  # deleted under our feet
            return self._tip_read(agent_id)
        if meta.get("tomb") and len(layout.commits) > 1:
            # a claim over another incarnation than the one it names (see _delete_at_sync)
            # is not this stream's: it reads as the commit under it, marked stray
            below = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-2][0])
            under = self._head_meta(below)
            if under is not None and under.get(_INC) != meta.get(_INC):
                return layout, {**under, _STRAY: "1"}
        if meta.get(_REWRITING) and len(layout.commits) > 1:  # (its head tag: see there)
            below = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-2][0])
            return layout, tip_under_claim(meta, self._head_meta(below))
        return layout, meta

    def _tip(self, agent_id: str) -> tuple[list[int], dict[str, str] | None]:
        """The live commits and the newest commit's metadata (None when there is none)."""
        layout, meta = self._tip_layout(agent_id)
        return [first for first, _ in layout.commits], meta

    def _base_sync(self, agent_id: str) -> int:
        """The seq before the agent's first stored event (0: a whole stream, or none)."""
        commits = self._layout(agent_id).commits
        return commits[0][0] - 1 if commits else 0

    @staticmethod
    def _tip_first(commits: Sequence[int], meta: dict[str, str]) -> int:
        """The first seq of the newest commit's append (a commit split by :meth:`prune`
        names it: its idempotency key covers the whole append)."""
        return int(meta.get("first", commits[-1]))

    def _head_sync(self, agent_id: str) -> int:
        _, meta = self._tip(agent_id)
        return int(meta["last"]) if meta is not None else 0
