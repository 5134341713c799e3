"""Rewrites (rekey, migrate, a redaction): under the stream's claim (:mod:`.claiming`),
each affected commit overwritten ``If-Match``, the newest (the head tag) last, a
prune's copy made meanwhile rewritten too, older versions dropped."""

from __future__ import annotations

import contextlib
import dataclasses

from ...errors import ConflictError, RewriteBelowPrunedBase
from ...records import RawEvent, RewriteRequest
from ..base import unstored_rewrite, validate_rewrite
from ..pruned_snapshots import lowest_pruned_snapshot, pruned_snapshot_rewrite
from .base import _INC, _MARK_TRIES, _WRITE, _Relist
from .claims import WRITTEN_BY, copies_after_newest
from .engine import S3Engine
from .layout import _BASE_RECORD, _decode_events
from .pruned_snapshots import drop_pruned_snapshots

__all__ = ["S3Rewrites"]


def _part_made(exc: ConflictError | RewriteBelowPrunedBase) -> None:
    """A conflict (a commit changed under the rewrite: a 412, or its claim taken over)
    after some of its writes landed: records of the agent are rewritten and others
    not, so the rewrite may partly stand. Still a ``ConflictError`` (its callers
    read the stream again and retry: rekey, migrate, a take-over's loser), but
    ``maybe_applied`` and saying so, as :mod:`.landed` does of a ``ClientError``
    part-way (``rewrite_many``'s default raises it as a ``BackendError`` then, not a
    False). Was: "nothing was written", and retention, rekey and migrate counted a
    change that partly stands as not made. ``exc`` itself, told so: its type and
    fields kept (a take-over's :class:`~statekeeper.errors.StreamClaimed`, its claim's
    age and the timeout: what a rekey gives up with — was: made again as a plain
    ``ConflictError``), its "nothing changed" dropped. The same of a
    :class:`~statekeeper.errors.RewriteBelowPrunedBase` found by a pass over the
    commits listed again after one whose writes landed (a prune moved the base under
    it): still that error (rekey and migrate plan it again), ``maybe_applied``."""
    said = str(exc)
    for nothing in _NOTHING:
        said = said.replace(nothing, "")
    exc.args = (
        f"{said} (part-way: some records of the rewrite were written before it — they"
        " stand, each valid — and others not; run it again on the stream as it is now"
        " to finish it)",
    )
    exc.maybe_applied = True  # type: ignore[union-attr]


#: what a conflict's message says of a write refused whole (:mod:`statekeeper.errors`),
#: not said of one refused part-way
_NOTHING = ("nothing changed — ", "nothing was written; ")


class S3Rewrites(S3Engine):
    """Rewrites (a part of :class:`~.backend.S3Backend`)."""

    def _rewrite_sync(self, request: RewriteRequest) -> None:
        """The stream claimed (:meth:`_claim_rewrite`), then :meth:`_rewrite_listed`,
        again from the listing when a commit it listed is gone (a prune's, after its
        copy of what lies above the base): nothing of the newest commit (the head tag)
        is written before that is found; a record it names below the new base is
        refused then (:func:`~statekeeper.backends.base.unstored_rewrite`); a snapshot
        it wrote below a base a prune moved meanwhile is deleted
        (:mod:`.pruned_snapshots`). The claim goes last."""
        key, token, head = self._claim_rewrite(request)
        claimed = self._landed.writes()  # (the writes that landed: the claim's)
        try:
            try:
                for _ in range(_MARK_TRIES):
                    try:
                        self._rewrite_listed(request, head, (key, token))
                        break
                    except _Relist:
                        continue
                else:
                    raise ConflictError(
                        request.agent_id, request.expected_seq, self._head_sync(request.agent_id)
                    )
            except (ConflictError, RewriteBelowPrunedBase) as exc:
                # (a refusal of a record below a base a prune moved meanwhile, found by
                # a pass after one whose writes landed: part-made too. Was: it said, as
                # every engine's, that nothing of the rewrite was written)
                if self._landed.writes() > claimed:
                    _part_made(exc)  # (itself, told so: raised on)
                raise
            drop_pruned_snapshots(self, request)  # (a prune under it: see there)
        except BaseException:
            with contextlib.suppress(Exception):  # (its writes cut short: the same)
                drop_pruned_snapshots(self, request)
            with contextlib.suppress(Exception):  # (the error told is the rewrite's)
                self._release_rewrite(key, token)
            raise
        self._release_rewrite(key, token)

    def _rewrite_listed(self, request: RewriteRequest, head: int, held: tuple[str, str]) -> None:
        """The rewrite of the live commits up to ``head`` (the claim ``held`` lies above
        it, checked before each write: :meth:`_hold`)."""
        agent_id = request.agent_id
        root = self._agent_root(agent_id) + "e/"
        commits = [first for first in self._commits(agent_id) if first <= head]
        if not commits:  # (deleted since the claim)
            raise ConflictError(agent_id, request.expected_seq, 0)
        meta = self._head_meta(root + self._seq_name(commits[-1]))
        if meta is None:
            raise _Relist  # (pruned since the listing)
        if int(meta.get("last", 0)) != head:
            raise ConflictError(agent_id, request.expected_seq, self._head_sync(agent_id))
        changes = {e.seq: e for e in request.events}
        if changes and min(changes) < commits[0]:  # (the live commits begin after the base)
            raise unstored_rewrite(agent_id, min(changes), commits[0] - 1)
        if (low := lowest_pruned_snapshot(request, commits[0] - 1)) is not None:
            raise pruned_snapshot_rewrite(agent_id, low, commits[0] - 1)  # (pruned)
        touched: list[int] = []
        for i, first in enumerate(commits):
            end = commits[i + 1] - 1 if i + 1 < len(commits) else head
            if any(first <= seq <= end for seq in changes):
                touched.append(first)
        base = next((s for s in request.snapshots if s.seq == commits[0] - 1), None)
        if base is not None and commits[0] not in touched:
            touched.insert(0, commits[0])  # it may hold the base snapshot (append_from_base)
        last = commits[-1]
        if request.head_tag is not None and last not in touched:
            touched.append(last)
        # the newest commit carries the head tag: it is written last, after the others
        # and the snapshots, each with If-Match so a concurrent rewrite is detected
        for first in sorted(touched, key=lambda f: f == last):
            if first == last:  # (the copies made meanwhile first: see copies_after_newest)
                self._rewrite_copies(request, commits, changes, head, held)
                self._hold(request, held)
                for snap in request.snapshots:
                    self._put_snapshot(agent_id, snap, meta.get(_INC))
            key = root + self._seq_name(first)
            obj = self._object(self._s3.get_object, key)
            if obj is None:
                raise _Relist  # (pruned since the listing: its records moved or gone)
            self._hold(request, held)  # (after the read: a take-over before it is seen)
            events = [
                (
                    dataclasses.replace(e, payload=base.payload, checksum=base.checksum)
                    if base is not None
                    else e
                )
                if e.type == _BASE_RECORD
                else dataclasses.replace(
                    e, payload=changes[e.seq].payload, checksum=changes[e.seq].checksum
                )
                if e.seq in changes
                else e
                for e in _decode_events(agent_id, obj["Body"].read())
            ]
            metadata = dict(obj.get("Metadata", {}))
            if first == last and request.head_tag is not None:
                metadata["headtag"] = request.head_tag.hex()
            metadata[WRITTEN_BY] = held[1]  # (its newest: a finished rewrite's, see there)
            refused = self._put_if_match(key, events, metadata, obj["ETag"])
            # (ours: a retry after a lost reply)
            if refused is not None and not self._ours(refused, key, metadata[_WRITE]):
                if self._object(self._s3.head_object, key) is None:
                    raise _Relist from refused  # (pruned since it was read)
                head = self._head_sync(agent_id)
                raise ConflictError(agent_id, request.expected_seq, head) from refused
            # (each key's replaced bytes gone as soon as it is written: a rewrite cut
            # short leaves none behind but the one being written)
            self._drop_older_versions([key])
        copies_after_newest(self, request, commits, changes, head, held)
        if last not in touched:
            self._hold(request, held)
            for snap in request.snapshots:
                self._put_snapshot(agent_id, snap, meta.get(_INC))
        self._drop_older_versions([self._snapshot_key(agent_id, s.seq) for s in request.snapshots])

    def _rewrite_copies(
        self,
        request: RewriteRequest,
        listed: list[int],
        changes: dict[int, RawEvent],
        head: int,
        held: tuple[str, str],
    ) -> None:
        """After :meth:`_rewrite_listed` wrote the commits it ``listed``: a commit made since
        at or below ``head`` is a prune's copy of one of them (:meth:`_split`), which
        reads end the older commit at, and the base then hides: one made from the bytes
        before this rewrite kept the old records and head tag live, this rewrite
        answered success. Such a copy is rewritten too (``If-Match`` on it as read);
        one the prune makes after this listing, the prune makes again from the rewritten
        commit (:meth:`_copy_again`)."""
        agent_id = request.agent_id
        root = self._agent_root(agent_id) + "e/"
        for _ in range(_MARK_TRIES):
            firsts = self._commits(agent_id)
            moved = False
            for i, first in enumerate(firsts):
                end = firsts[i + 1] - 1 if i + 1 < len(firsts) else head
                tag = request.head_tag if first <= head <= end else None
                if first in listed or first > head:
                    continue
                if tag is None and not any(first <= seq <= end for seq in changes):
                    continue
                obj = self._object(self._s3.get_object, root + self._seq_name(first))
                if obj is None:
                    moved = True  # (deleted: by a prune after it; listed again)
                    continue
                stored = _decode_events(agent_id, obj["Body"].read())
                events = [
                    dataclasses.replace(
                        e, payload=changes[e.seq].payload, checksum=changes[e.seq].checksum
                    )
                    if e.seq in changes and e.type != _BASE_RECORD
                    else e
                    for e in stored
                ]
                metadata = dict(obj.get("Metadata", {}))
                if events == stored and (tag is None or metadata.get("headtag") == tag.hex()):
                    continue
                if tag is not None:
                    metadata["headtag"] = tag.hex()
                self._hold(request, held)
                key = root + self._seq_name(first)
                if self._put_if_match(key, events, metadata, obj["ETag"]) is not None:
                    moved = True
                    continue
                self._drop_older_versions([key])
            if not moved:
                return
        raise ConflictError(agent_id, request.expected_seq, self._head_sync(agent_id))

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace record bytes: the stream claimed first (no append or other rewrite
        lands until it is done: see the module documentation), each affected commit
        object is rewritten with a conditional PUT (``If-Match``), the newest one
        (which carries the head tag) last, and the claim deleted. S3 has no
        multi-object transaction: an interrupted rewrite leaves some records rewritten
        and others not (each one valid), and its claim; running it again finishes it. A
        conflict once some of its records were written (a commit changed under it, its
        claim taken over) says so: ``maybe_applied`` on the ``ConflictError``."""
        self._check_can_write()
        validate_rewrite(request)
        await self._run(self._rewrite_sync, request)
