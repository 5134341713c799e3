"""Deletes: an agent's stream claimed at its head (an empty commit marked as a
delete's), then its objects erased, the claim last among the commits; a stray claim
(over another incarnation) withdrawn; and ``drop_all``."""

from __future__ import annotations

from ...errors import ConfigurationError, ConflictError
from .base import (
    _AGENT_PARTS,
    _INC,
    _REWRITING,
    _STRAY,
    _commit_lock,
)
from .claims import FINISHED
from .engine import S3Engine
from .layout import _agent_key, _decode_events, _encode_events, _Layout

__all__ = ["S3Deletes"]


class S3Deletes(S3Engine):
    """Deletes (a part of :class:`~.backend.S3Backend`)."""

    def _erase_sync(self, agent_id: str) -> None:
        """Delete every object of ``agent_id``, as listed now."""
        root = self._agent_root(agent_id)
        # (only its e/, h/, s/ and k/ objects: anything else under its root is not ours)
        keys = [k for k in self._list(root) if k[len(root) : len(root) + 2] in _AGENT_PARTS]
        # commits last, base objects after them: an interrupted delete leaves a
        # readable (shorter) agent, or a base object the next first append removes
        keys.sort(key=lambda k: (k.startswith(root + "e/"), k.startswith(root + "e/b")))
        self._delete_keys(keys)

    def _delete_sync(self, agent_id: str) -> bool:
        """See :meth:`delete_agent`: the stream claimed at its head (as
        :meth:`delete_agent_at`), then deleted; an append winning the claim's slot first
        is deleted with it (the claim is tried again after it)."""
        while True:
            # (unchecked: a stream that lost its newest commits can still be deleted)
            _, meta = self._tip_layout(agent_id, check=False)
            if meta is None:  # no stream (an interrupted delete may have left objects)
                self._erase_sync(agent_id)
                return False
            head = int(meta["last"])
            # (a stray claim holds off appends as well as this one's would)
            # (a rewrite's claim: the delete wins, the rewrite fails on the deleted objects)
            claimed = meta.get("tomb") or meta.get(_STRAY) or meta.get(_REWRITING)
            if claimed or self._claim(agent_id, head, meta):
                self._finish_delete(agent_id)
                return True

    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent's stream: True if it had one. Claimed first, as in
        :meth:`delete_agent_at` (an append that wins the claim's slot is deleted with
        the stream, the claim made after it), so no append lands while its objects are
        deleted (one landing after the listing used to survive alone: a stream
        starting at its seq, with no base to read its state from)."""
        self._check_writable()
        return await self._run(self._delete_sync, agent_id)

    def _delete_at_sync(self, agent_id: str, head: int, checksum: bytes | None = None) -> bool:
        """See :meth:`delete_agent_at`."""
        layout, meta = self._tip_layout(agent_id)
        if meta is not None and meta.get(_REWRITING):  # a dead rewrite's, when stale
            claim = self._agent_root(agent_id) + "e/" + self._seq_name(int(meta["last"]) + 1)
            if self._break_stale_claim(claim, meta.get(FINISHED)):
                layout, meta = self._tip_layout(agent_id)
        current = int(meta["last"]) if meta is not None else 0
        held = ""  # the commit holding the head record this delete names
        if checksum is not None and meta is not None and current == head:
            held = self._identified(agent_id, head, checksum, meta, layout)
        if meta is not None and meta.get(_STRAY) and current == head:
            self._withdraw_claim(agent_id, head)  # (another incarnation's: see below)
        if not (meta is not None and meta.get("tomb") and current == head):
            if meta is None or current != head:
                raise ConflictError(agent_id, head, current)
            if not self._claim(agent_id, head, meta):
                # an append at this head won the slot (or a try of this claim did)
                _, meta = self._tip_layout(agent_id)
                current = int(meta["last"]) if meta is not None else 0
                if not (meta is not None and meta.get("tomb") and current == head):
                    raise self._conflict(agent_id, head, meta, current)
            elif held and self._claim_is_stray(held, meta):
                # the agent deleted and written again up to ``head`` between the
                # identity check and the claim (S3 cannot make a write conditional on
                # another object): the claim lies over the new stream; withdrawn
                self._withdraw_claim(agent_id, head)
                raise ConflictError(agent_id, head, head)
        self._finish_delete(agent_id)
        return True

    def _identified(
        self, agent_id: str, head: int, checksum: bytes, meta: dict[str, str], layout: _Layout
    ) -> str:
        """The key of the commit holding ``head`` (in ``layout``, below any claim at
        ``head + 1``), unless it is not of the incarnation ``meta`` names (the newest
        commit's, read with ``layout``: a claim names its stream's) or its event at
        ``head`` has not ``checksum``: then :class:`~statekeeper.errors.ConflictError`
        (the agent was deleted and written again up to ``head``: another head record)."""
        commits = [first for first, _ in layout.commits if first <= head]
        if not commits:
            raise ConflictError(agent_id, head, 0)
        key = self._agent_root(agent_id) + "e/" + self._seq_name(commits[-1])
        found = self._get(key)
        if found is None or found[1].get(_INC) != meta.get(_INC):
            raise ConflictError(agent_id, head, head)
        sums = [e.checksum for e in _decode_events(agent_id, found[0]) if e.seq == head]
        if sums != [checksum]:
            raise ConflictError(agent_id, head, head)
        return key

    def _withdraw_claim(self, agent_id: str, head: int) -> None:
        """Delete the claim at ``head + 1`` that lies over another incarnation than the
        one it names (made for a stream deleted and written again up to ``head``; its
        process may have died before withdrawing it) — only while that object is still
        an empty claim (If-Match on its ETag): an append's commit put there since is
        kept. Appends at ``head`` conflict while it is there."""
        key = self._agent_root(agent_id) + "e/" + self._seq_name(head + 1)
        found = self._object(self._s3.head_object, key)
        if found is None or not dict(found.get("Metadata", {})).get("tomb"):
            return
        self._delete_if_match(key, found["ETag"])  # (an append's commit put since: kept)

    def _claim_is_stray(self, held: str, claim: dict[str, str]) -> bool:
        """Whether a claim of incarnation ``claim[_INC]`` lies over another stream than
        the one whose commit ``held`` (holding the head) it was made for: that commit
        is gone (a delete erases every commit) or of another incarnation now."""
        below = self._head_meta(held)
        return below is None or below.get(_INC) != claim.get(_INC)

    def _claim(self, agent_id: str, head: int, meta: dict[str, str]) -> bool:
        """Create the claim of a delete of the stream at ``head`` (``meta``: its newest
        commit's): an empty commit marked as a delete's, at the slot an append at
        ``head`` would take. False when that slot is taken already."""
        claim = {"last": str(head), "tomb": "1", "created": meta["created"]}
        claim["updated"] = meta["updated"]
        if "headtag" in meta:  # the head is still the stream's, authenticated as before
            claim["headtag"] = meta["headtag"]
        if _INC in meta:  # (the stream's, to its end)
            claim[_INC] = meta[_INC]
        key = self._agent_root(agent_id) + "e/" + self._seq_name(head + 1)
        with _commit_lock(self.endpoint_url or "", self.bucket, key):
            return self._put_new(key, _encode_events(()), claim)

    def _finish_delete(self, agent_id: str) -> None:
        """Delete a claimed stream (the claim, its newest commit, goes last among the
        commits: until then it holds off every append)."""
        self._erase_sync(agent_id)

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete ``agent_id`` only if its head is still ``head``
        (:meth:`Backend.delete_agent_at`). S3 has no transaction over several objects, so
        the delete first *claims* the stream: it creates the commit object an append at
        ``head`` would create next (``head + 1``, conditional: ``IfNoneMatch``), empty and
        marked as a delete's. Of the claim and an append at that head exactly one wins:
        a losing claim is a :class:`~statekeeper.errors.ConflictError` with nothing
        deleted (the default compared the head, then deleted whatever was there — an
        append landing between the two was deleted with the agent). The won claim then
        deletes the stream, itself last among the commits; until it is gone the stream
        reads as before (head ``head``) and every append conflicts. A process that dies
        after its claim leaves it to the next writer: an append (or this delete sent
        again) finds the claim on the newest commit and finishes the delete first.

        With ``checksum`` (the head event's, as read), the commit holding ``head`` is
        read first: another checksum or incarnation is a ConflictError. The claim names
        that incarnation; once it is won, the commit under it is looked at again, and a
        claim lying over another incarnation (the agent deleted and written again up to
        ``head`` between the two) is withdrawn: a ConflictError, nothing deleted. Until
        it is withdrawn appends at ``head`` conflict (loud), and none finishes its
        delete; a process dying in between leaves the agent refusing appends at that
        head until it is deleted (``statekeeper delete``)."""
        self._check_can_write()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        return await self._run(self._delete_at_sync, agent_id, head, checksum)

    def _drop_all_sync(self, delete_bucket: bool) -> int:
        # (only agents' objects: a store whose prefix lies inside ours keeps its own)
        keys = [k for k in self._list(self._root) if _agent_key(k[len(self._root) :])]
        # the agents: those with a commit (``<root><hex id>/e/...``), as other engines count
        agents = {k[len(self._root) :].split("/", 1)[0] for k in keys if "/e/" in k}
        self._delete_keys(keys + self._list(self._markers))
        if delete_bucket:
            self._s3.delete_bucket(Bucket=self.bucket)
            self._ready = False
        return len(agents)

    async def drop_all(self, *, delete_bucket: bool = False) -> int:
        """Delete every object under this backend's prefix (tests, benchmarks): the
        agents' and the store-level markers (the store's own ``statekeeper.meta``
        stays); and the bucket too when asked (it must then hold nothing else). Returns
        how many agents there were (as every engine does; it used to be how many of
        their objects)."""
        self._check_writable()
        return await self._run(self._drop_all_sync, delete_bucket)
