"""A rewrite's claim on a stream: made at the slot the next append would take (or
taken over from another rewrite's), checked before each write of the rewrite, broken
by an append when stale or finished, released at the end. What a reader makes of a
claim is in :mod:`.claims`."""

from __future__ import annotations

import contextlib
import hashlib

from ...errors import ConflictError
from ...records import RewriteRequest
from .base import (
    _CONDITION_FAILED,
    _INC,
    _NOT_FOUND,
    _REWRITING,
    _STRAY,
    _WRITE,
    ClientError,
    _code,
    _commit_lock,
    _token,
)
from .claims import claim_age, conflict
from .engine import S3Engine
from .layout import _encode_events

__all__ = ["S3RewriteClaims"]


class S3RewriteClaims(S3Engine):
    """A rewrite's claim (a part of :class:`~.backend.S3Backend`)."""

    @staticmethod
    def _rewrite_digest(request: RewriteRequest) -> str:
        """What names a rewrite's request in its claim (for whoever inspects a claim:
        any later rewrite at the same head takes a claim over, see
        :meth:`_claim_rewrite`)."""
        digest = hashlib.sha256()

        def part(value: bytes | str | int | float | None) -> None:
            if isinstance(value, bytes):
                raw = b"b" + value
            else:
                raw = b"-" if value is None else b"+" + repr(value).encode()
            digest.update(len(raw).to_bytes(8, "big") + raw)

        for head in (request.agent_id, request.expected_seq, request.expected_tag):
            part(head)
        part(request.head_tag)
        for e in request.events:
            for field in (e.seq, e.payload, e.checksum):
                part(field)
        part(None)
        for snap in request.snapshots:
            for value in (snap.seq, snap.timestamp, snap.payload, snap.checksum):
                part(value)
        return digest.hexdigest()[:32]

    def _claim_rewrite(self, request: RewriteRequest) -> tuple[str, str, int]:
        """Claim the stream for ``request``: an empty commit marked as a rewrite's
        (:data:`_REWRITING`: its request's digest; ``at``: when, by :attr:`_clock`),
        created (``IfNoneMatch``) at the slot an append at the head would take, with the
        newest commit's metadata (head, head tag, key: the stream reads as before).
        Until it is deleted every append at the head conflicts (it cannot land after
        the head check: its events would follow a head event this rewrite replaces, its
        head tag hide this one's) unless the claim is older than
        :attr:`rewrite_claim_timeout` (:meth:`_break_stale_claim`). The head and head
        tag are checked again once the claim is held: a rewrite that ran whole between
        the first check and the claim has moved the head tag.

        A claim found there (another rewrite's, running or its process dead) is taken
        over: overwritten (``If-Match``) with this attempt's own token, which the other
        rewrite checks before each of its writes (:meth:`_hold`), failing at its next
        one. A half-done rewrite left each commit rewritten or not and the head tag
        where it was (the newest commit is written last): this rewrite, checked against
        that head, rewrites over it. One that wrote the newest commit (its head tag) and
        died before deleting its claim had finished: the claim is deleted and this
        rewrite, whose head tag is no longer the stream's, conflicts.
        Returns the claim's key, this attempt's token and the head."""
        agent_id = request.agent_id
        layout, meta = self._tip_layout(agent_id, check=False)
        if meta is not None and meta.get(_STRAY):  # a claim made for another incarnation
            self._withdraw_claim(agent_id, int(meta["last"]))  # (as an append does)
            layout, meta = self._tip_layout(agent_id, check=False)
        head = int(meta["last"]) if meta is not None else 0
        root = self._agent_root(agent_id) + "e/"
        key = root + self._seq_name(head + 1)

        def expected(found: dict[str, str] | None) -> bool:
            tag = found.get("headtag") if found is not None else None
            return (
                found is not None
                and int(found.get("last", 0)) == request.expected_seq
                and (bytes.fromhex(tag) if tag else None) == request.expected_tag
            )

        if meta is None or not expected(meta) or meta.get("tomb") or meta.get(_STRAY):
            raise ConflictError(agent_id, request.expected_seq, head)
        claim = {_REWRITING: self._rewrite_digest(request), "last": str(head)}
        claim["created"], claim["updated"] = meta["created"], meta["updated"]
        claim["first"] = str(self._tip_first([c for c, _ in layout.commits], meta))
        for name in ("headtag", _INC, "key", "keyname"):
            if name in meta:
                claim[name] = meta[name]
        claim["at"] = repr(self._clock())
        claim[_WRITE] = token = _token()
        # (the body bears the token: two writes of a claim never share an ETag)
        if meta.get(_REWRITING):  # another rewrite's (running, or its process died)
            key = root + self._seq_name(layout.commits[-1][0])
            if self._taken_by.respected(key, meta, self._clock(), self.rewrite_claim_timeout):
                raise self._conflict(agent_id, request.expected_seq, meta, head)  # (took ours)
            won = self._take_over(key, meta, claim)
        else:
            with _commit_lock(self.endpoint_url or "", self.bucket, key):
                won = self._put_new(key, _encode_events((), token), claim)
        if not won:  # an append at the head, a delete's or another rewrite's claim
            raise self._conflict(agent_id, request.expected_seq, self._head_meta(key))
        try:
            below = [first for first, _ in self._layout(agent_id).commits if first <= head]
            now = self._head_meta(root + self._seq_name(below[-1])) if below else None
            if not expected(now):
                raise ConflictError(agent_id, request.expected_seq, head)
        except BaseException:
            with contextlib.suppress(Exception):
                self._release_rewrite(key, token)
            raise
        return key, token, head

    def _take_over(self, key: str, meta: dict[str, str], claim: dict[str, str]) -> bool:
        """Overwrite the rewrite's claim at ``key`` (read as ``meta``) with ``claim``,
        only if it is still that claim (``If-Match`` on its ETag: every write of a claim
        has a body of its own); False if something else changed it first."""
        found = self._object(self._s3.head_object, key)
        if found is None or dict(found.get("Metadata", {})).get(_WRITE) != meta.get(_WRITE):
            return False
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=_encode_events((), claim[_WRITE]),
                Metadata=claim,
                IfMatch=found["ETag"],
            )
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED | _NOT_FOUND:
                return self._ours(exc, key, claim[_WRITE])
            raise
        self._drop_older_versions([key])
        return True

    def _hold(self, request: RewriteRequest, held: tuple[str, str]) -> None:
        """Before each write of a rewrite: its claim ``held`` (key, token) is still its
        own, else :class:`ConflictError` and nothing more written (another rewrite took
        it over, an append broke it as stale, a delete erased it)."""
        found = self._head_meta(held[0])
        if found is None or found.get(_WRITE) != held[1]:
            self._taken_by.note(held[0], found)  # (taken over: not taken back)
            raise self._conflict(request.agent_id, request.expected_seq, found)

    def _conflict(
        self, agent_id: str, expected: int, found: dict[str, str] | None, head: int | None = None
    ) -> ConflictError:
        """:func:`.claims.conflict` (the stored head read now unless ``head`` is given)."""
        head = self._head_sync(agent_id) if head is None else head
        return conflict(agent_id, expected, head, found, self._clock(), self.rewrite_claim_timeout)

    def _break_stale_claim(self, key: str, finished: str | None = None) -> bool:
        """A rewrite's claim at ``key`` older than :attr:`rewrite_claim_timeout` (or
        undated) is taken for a dead process's and deleted (``If-Match`` on the claim as
        read: a take-over since is kept), and one still bearing the token ``finished``
        (see :mod:`.claims`). True if it was deleted."""
        found = self._object(self._s3.head_object, key)
        meta = dict(found.get("Metadata", {})) if found is not None else {}
        if found is None or not meta.get(_REWRITING):
            return False
        done = finished is not None and meta.get(_WRITE) == finished
        if not done and claim_age(meta, self._clock()) <= self.rewrite_claim_timeout:
            return False
        if not self._delete_if_match(key, found["ETag"]):
            return False  # (taken over since it was read)
        self._drop_older_versions([key])
        return True

    def _release_rewrite(self, key: str, token: str) -> None:
        """Delete the rewrite's claim ``key`` if it is still the one it made (``token``):
        a delete may have erased it, and another stream's object taken its place."""
        found = self._object(self._s3.head_object, key)
        if found is None or dict(found.get("Metadata", {})).get(_WRITE) != token:
            return
        self._delete_if_match(key, found["ETag"])
        self._drop_older_versions([key])
