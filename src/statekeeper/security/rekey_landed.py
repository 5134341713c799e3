"""What a stream's rekey (:mod:`.rekey`) re-encrypted: the seqs of the records its
rewrites wrote, and what a rewrite that raised part-way sent (``maybe_applied``: S3,
whose rewrite writes one object at a time, refused after some of them landed — a
commit changed under it, a prune moved the base under it). A walk that finds such a
record, snapshot or head tag stored as it was sent counts it re-encrypted by this
rekey, not "already done" (was: counted as skipped; a head tag, not at all)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..records import RawEvent, RawSnapshot, RewriteRequest

__all__ = ["Ours"]


class Ours(set[int]):
    """The seqs of a stream this rekey re-encrypted (counted: a walk again finds them
    done), with what its part-way rewrites sent (not counted until found)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[int, bytes] = {}
        self.snapshots: dict[int, bytes] = {}
        self.tags: set[bytes] = set()

    async def rewriting(
        self, rewrite: Callable[[RewriteRequest], Awaitable[None]], request: RewriteRequest
    ) -> None:
        """``rewrite(request)``; what it sent noted when it raised ``maybe_applied``."""
        try:
            await rewrite(request)
        except BaseException as exc:
            if getattr(exc, "maybe_applied", False):
                self.events.update((e.seq, e.checksum) for e in request.events)
                self.snapshots.update((s.seq, s.checksum) for s in request.snapshots)
                if request.head_tag is not None:
                    self.tags.add(request.head_tag)
            raise

    def landed(self, raw: RawEvent) -> bool:
        """Is ``raw`` (found under the active key) a record a part-way rewrite of this
        rekey wrote, not counted yet? Then it is counted now (one of ours)."""
        if raw.seq in self or self.events.get(raw.seq) != raw.checksum:
            return False
        self.add(raw.seq)
        return True

    def snapshot_landed(self, snap: RawSnapshot) -> bool:
        """Is ``snap`` (found under the active key) one a part-way rewrite wrote?"""
        return self.snapshots.get(snap.seq) == snap.checksum

    def head_landed(self, tag: bytes | None) -> bool:
        """Is ``tag`` (the stored head tag, under the active key) one a part-way
        rewrite of this rekey wrote?"""
        return tag is not None and tag in self.tags
