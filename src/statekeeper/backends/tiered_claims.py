"""The cold markers of :class:`~statekeeper.backends.tiered.TieredBackend` and the
claims they are: reading a marker, the claim record (a demotion's, a rehydration's),
taking over a claim whose owner is provably gone (:mod:`.tiered_owner`), ending a
claim, and the conditional clean-ups that touch only what is this store's own.

A marker is the durable stream ``COLD_MARKER + agent_id``. Its first record is a
demotion's claim (a conditional insert with a token of its own, before the cold tier is
touched); its second, the demotion done (committed with the delete of the agent's
stream where the durable tier commits several streams at once: *fenced*). A
rehydration under such a tier appends a third record, its own claim, before it copies
the agent back; it deletes the marker at its end. Every record carries the demotion's
body (its head, times and head digest: :mod:`.tiered_cold`); a claim record adds when
it was made and by whom (``claimed``, ``owner``)."""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

import orjson

from ..arguments import INTERNAL_PREFIX
from ..errors import ConfigurationError, ConflictError, IntegrityError
from ..records import AgentInfo, AppendRequest, RawEvent, RewriteRequest
from .base import Backend, Capability
from .tiered_base import TieredPart
from .tiered_cold import check_demoted_copy, marker_body, same_record
from .tiered_owner import IN_FLIGHT, abandoned_here, claim_owner, owner_gone

__all__ = [
    "CLAIM_STALE",
    "COLD_MARKER",
    "MARKER_CEIL",
    "TieredClaims",
    "is_claim",
    "is_internal",
    "is_marker",
]

logger = logging.getLogger("statekeeper.backends.tiered")

#: durable-tier agent ids of the markers of demoted agents (``COLD_MARKER + agent_id``)
COLD_MARKER = "\x01sk-cold/"
MARKER_CEIL = "\x01sk-cold0"  # sorts right after every marker id
#: seconds after which a claim whose owner is provably gone may be taken over
#: (:meth:`TieredClaims._take_over`): never sooner, whatever the owner
CLAIM_STALE = 60.0


def is_marker(agent_id: str) -> bool:
    return agent_id.startswith(COLD_MARKER)


def is_internal(agent_id: str) -> bool:
    """A stream of the store's own (a cold marker, the audit log): it always stays in
    the durable tier, never demoted, so there is nothing to rehydrate."""
    return agent_id.startswith(INTERNAL_PREFIX)


def is_claim(body: dict[str, Any]) -> bool:
    """Is the marker ``body`` (:meth:`TieredClaims._marker_entry`'s) a demotion's claim
    made with the fenced last step (its owner recorded) and never done: one record?
    Such a demotion never deleted the stream — it deletes it only in the commit of the
    marker's second record — so the durable stream, whatever is there (nothing: the
    agent deleted under the claim), is the agent, never its cold copy. (A marker of an
    earlier version, or of a durable tier without that step, records no owner.)"""
    return body.get("_seq") == 1 and "claimed" in body


class TieredClaims(TieredPart):
    """The marker and claim part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    async def _marker(self, agent_id: str) -> AgentInfo | None:
        entry = await self._marker_entry(agent_id)
        return None if entry is None else entry[0]

    async def _marker_entry(self, agent_id: str) -> tuple[AgentInfo, dict[str, Any]] | None:
        """``agent_id``'s cold marker, and the JSON body of its head record (None: not
        demoted), with the marker stream's head (``_seq``: 1, a demotion's claim; 2, a
        demotion done, the agent's stream deleted; 1 too for a marker of an earlier
        version; 3 (2 over an earlier version's), a rehydration's claim, its body saying
        ``rehydrating``) and the head record's token (``_token``, hex: its checksum)."""
        if is_internal(agent_id):  # never demoted (and its marker's id would be invalid)
            return None
        events = await self.durable.read(COLD_MARKER + agent_id, 0, None, limit=3)
        body = marker_body(events[-1:])
        if body is None:
            return None
        body = body | {"_seq": events[-1].seq, "_token": events[-1].checksum.hex()}
        info = AgentInfo(
            agent_id, int(body["head"]), float(body["created"]), float(body["updated"])
        )
        return info, body

    async def _delete_marker(self, agent_id: str, body: dict[str, Any]) -> None:
        """Delete ``agent_id``'s marker only while its head record is the one ``body``
        (:meth:`_marker_entry`'s) was read from, else
        :class:`~statekeeper.errors.ConflictError` and nothing deleted."""
        marker_id = COLD_MARKER + agent_id
        await self.durable.delete_agent_at(marker_id, body["_seq"], bytes.fromhex(body["_token"]))

    def _fenced(self) -> bool:
        """Does the durable tier commit a demotion's last step with its claim's check
        (several streams in one commit, a head tag compared)? Else claims record no
        owner and are never taken over."""
        durable = self.durable
        return durable.appends_together and durable.compares_head_tag

    async def _claim_rehydration(
        self, agent_id: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Claim the rehydration of ``agent_id`` (its marker ``body``, a demotion done)
        before anything is copied back: a record appended to the marker, conditional on
        the one read (of two rehydrations, one claims), that names this process — so
        that a rehydration killed before its end (the cold copy and the marker deleted)
        is taken over (:meth:`_take_over`) rather than leaving the agent never demoted
        again. The claim's body (its token in :data:`~.tiered_owner.IN_FLIGHT`, to be
        discarded by the caller), or None: not this rehydration's to end (the marker is
        another's claim already, or changed meanwhile; or the durable tier is not
        :meth:`_fenced`, whose claims name no owner)."""
        if not self._fenced():
            return None
        if body.get("rehydrating"):
            # another's claim; or this process's, its rehydration failed (an error, not a
            # kill): no longer under way, this one goes on with it (the caller holds the
            # agent's lock: no other here acts on it meanwhile)
            held = bytes.fromhex(body["_token"])
            if not abandoned_here(body.get("owner"), held):
                return None
            IN_FLIGHT.add(held)
            return body
        seq, tag = await self.durable.head_tag(COLD_MARKER + agent_id)
        if seq != body["_seq"] or tag not in (None, bytes.fromhex(body["_token"])):
            return None  # (changed since it was read)
        token = secrets.token_bytes(16)
        now = self.clock()
        kept = {k: v for k, v in body.items() if not k.startswith("_")}
        claim = kept | {"claimed": now, "owner": claim_owner(), "rehydrating": True}
        IN_FLIGHT.add(token)
        try:
            await self.durable.append(
                AppendRequest(
                    COLD_MARKER + agent_id,
                    seq,
                    (RawEvent(seq + 1, "cold", now, orjson.dumps(claim), token),),
                    head_tag=token,
                    expected_tag=tag,  # (None: a marker of an earlier version)
                    check_tag=True,
                )
            )
        except ConflictError:
            IN_FLIGHT.discard(token)
            return None
        except BaseException:
            # (written or not — a reply lost — it is no longer under way: this process's
            # next use of the agent takes it up. Was: left in IN_FLIGHT, the claim, if
            # written, never taken up nor over while this process lived)
            IN_FLIGHT.discard(token)
            raise
        return claim | {"_seq": seq + 1, "_token": token.hex()}

    async def _take_over(
        self, agent_id: str, entry: tuple[AgentInfo, dict[str, Any]], head: int
    ) -> bool:
        """Take over the claim ``entry`` of a demotion, or of a rehydration, that died
        after it (True: the marker deleted, claim again), or leave it (False). Only a
        claim beside the whole stream — a demotion's (a marker of one record: its
        demotion never finished) made with the fenced last step (:meth:`_fenced`: had its
        owner lived on, its delete of the stream fails once the claim is not its own),
        or a rehydration's that copied the agent back (:meth:`_claim_rehydration`: what
        is left of its end, the cold copy, is this store's own, replaced by the next
        demotion) — older than ``CLAIM_STALE``, whose owner is provably gone
        (:func:`~.tiered_owner.owner_gone`); the marker's delete is conditional on that
        claim (of two demotions taking it over, one does). A marker of an earlier
        version names no owner: never taken over."""
        body = entry[1]
        claimed = body.get("claimed")
        if (
            not self._fenced()
            or not (body.get("_seq") == 1 or body.get("rehydrating") is True)
            or head < entry[0].head_seq
            or not isinstance(claimed, int | float)
            or self.clock() - claimed < CLAIM_STALE
        ):
            return False
        token = bytes.fromhex(body["_token"])
        if not owner_gone(body.get("owner"), token):
            return False
        try:
            await self._delete_marker(agent_id, body)
        except ConflictError:
            return False
        logger.warning(
            "agent %r: took over the claim of a %s whose process is gone (%s)",
            agent_id,
            "rehydration" if body.get("rehydrating") else "demotion",
            body.get("owner"),
        )
        return True

    async def _end_deleted(
        self, cold: Backend, agent_id: str, entry: tuple[AgentInfo, dict[str, Any]]
    ) -> bool:
        """End a rehydration's claim (``entry``) that a delete of the agent left beside
        no stream and no cold copy (True: the marker deleted, conditional on that claim,
        or changed meanwhile: look again). Its owner's end (the cold copy, then the
        marker) is made only beside the whole stream; a delete deletes the cold copy,
        then the marker, then the stream — but an earlier version's conditional delete
        ends only a marker of two records, so the claim's three stayed, beside nothing.
        Was: every load of the deleted agent, and every write of a new agent of that
        id, raised :class:`~statekeeper.errors.IntegrityError` (the cold copy of a
        demoted agent missing) — the delete meant the agent absent."""
        body = entry[1]
        if not body.get("rehydrating"):
            return False
        if await self.durable.head(agent_id) or await cold.head(agent_id):
            return False
        try:
            await self._delete_marker(agent_id, body)
        except ConflictError:
            return True  # (changed meanwhile)
        logger.warning(
            "agent %r: a rehydration's claim beside no stream and no cold copy (what a"
            " delete of the agent by an earlier version left) ended: the agent is absent",
            agent_id,
        )
        return True

    @staticmethod
    def _claimed(agent_id: str) -> bool:
        """A demotion that found the agent's marker: False, nothing written. (A marker
        beside the whole stream that stays there is a demotion that died after its
        claim or a rehydration that died before its end, each taken over later
        (:meth:`_take_over`): nothing is lost — the durable stream is the agent, read
        there. A rehydration's under a tier that is not :meth:`_fenced` names no owner:
        such an agent is not demoted again until it is deleted.)"""
        logger.info(
            "agent %r not demoted: its cold marker is there (another demotion's claim, a"
            " rehydration under way, or a demotion that died after its claim)",
            agent_id,
        )
        return False

    async def _fence_demotion(self, agent_id: str) -> None:
        """Before a change that keeps the stream's head record (a prune, a rewrite below
        the head, a key rename), and again after it (a claim made meanwhile, its copy
        of the stream as it was before; was: looked at before only): a demotion's claim
        (:func:`is_claim`) beside the stream gets another head tag (a rewrite of
        nothing, conditional on the tag read), so that demotion's last step — committed
        only while the marker carries its own token as its tag — deletes nothing; its
        clean-up then deletes its cold copy and its marker (both still its own) and the
        changed stream stays. Was: that step, conditional on the head record alone, went
        through; the cold copy made before the change became the agent (a prune's
        history, the old key names, a rekey's records under the old key back at the next
        load, without an error). Nothing on a tier that is not :meth:`_fenced` (its
        demotion's delete is conditional on the head record alone). Still open: such a
        demotion whose last step commits between the change and the look after it, where
        the change is not committed with the claim's check (a key rename: see
        :meth:`~.tiered_rehydrate.TieredRehydrate._change_checked`)."""
        if not self._fenced() or not self.durable.supports(Capability.REWRITE):
            return
        entry = await self._marker_entry(agent_id)
        if entry is None or not is_claim(entry[1]):
            return
        marker_id = COLD_MARKER + agent_id
        seq, tag = await self.durable.head_tag(marker_id)
        if seq != 1:
            return  # (its demotion done meanwhile: the caller brings the agent back)
        fence = RewriteRequest(marker_id, seq, tag, head_tag=secrets.token_bytes(16))
        with contextlib.suppress(ConflictError):  # (changed meanwhile: done, or ended)
            await self.durable.rewrite(fence)

    async def _end_claim(self, agent_id: str) -> None:
        """Delete ``agent_id``'s marker, conditional on the one read now (a claim since
        is another demotion's, left to it)."""
        entry = await self._marker_entry(agent_id)
        if entry is not None:
            body = entry[1]
            with contextlib.suppress(ConflictError):
                await self._delete_marker(agent_id, body)

    async def _release(
        self,
        cold: Backend | None,
        agent_id: str,
        token: bytes,
        copied: tuple[int, bytes] | None = None,
    ) -> None:
        """End a demotion's claim if the marker is still its own (``token``): its copy
        in ``cold`` first (None: it wrote none; ``copied``: only while the copy is the
        whole one it wrote, that head and head checksum), then its marker, by a delete
        conditional on the token. A marker that is not its own (its claim ended by a
        delete of the agent, another demotion's since) and that demotion's cold copy
        are never touched."""
        marker_id = COLD_MARKER + agent_id
        held = await self.durable.read(marker_id, 0, 1)
        if not held or held[0].checksum != token:
            return
        if cold is not None and copied is None:
            await cold.delete_agent(agent_id)
        elif cold is not None and copied is not None:
            with contextlib.suppress(ConflictError):
                await cold.delete_agent_at(agent_id, *copied)
        with contextlib.suppress(ConflictError):
            await self.durable.delete_agent_at(marker_id, 1, token)

    async def _own_cold(self, cold: Backend, agent_id: str) -> tuple[bool, bool]:
        """Has this store a marker of ``agent_id``, and is the cold tier's copy of it
        this store's (:meth:`_own_copy`)? A copy that is not is another store's sharing
        the cold tier, never to be deleted here."""
        entry = await self._marker_entry(agent_id)
        ours = await self._own_copy(cold, agent_id, entry)
        if entry is not None and not ours and await cold.head(agent_id):
            logger.warning(
                "the cold tier's copy of agent %r is not the one this store demoted"
                " (another store's sharing the cold tier?): left there",
                agent_id,
            )
        return entry is not None, ours

    async def _own_copy(
        self, cold: Backend, agent_id: str, entry: tuple[AgentInfo, dict[str, Any]] | None
    ) -> bool:
        """The one rule of what in the cold tier is this store's (a delete, ``drop_all``
        and a demotion about to replace a copy ask it): the copy this store's marker
        (``entry``) says it demoted, whole (a demoted agent, or a demotion's copy
        finished before its last step); or this store's durable stream up to the copy's
        head, the same record there (what a claim copied so far, or left when its
        demotion died; with no marker, what a demotion cut short or a rehydration
        killed before its end left). Anything else is another store's sharing the cold
        tier (or the copy of an agent of that id deleted since), never touched here.
        (:meth:`_drop_orphan` asks the same of what it wrote, the stream being gone;
        the claim token says whose the *marker* is, not the copy.)"""
        if entry is not None:
            with contextlib.suppress(IntegrityError):
                await check_demoted_copy(cold, agent_id, entry[1])
                return True
        held = await cold.head(agent_id)
        if not 0 < held <= await self.durable.head(agent_id):
            return False
        theirs = await cold.read(agent_id, held - 1, held)
        ours = await self.durable.read(agent_id, held - 1, held)
        return bool(theirs and ours and same_record(theirs[0], ours[0]))

    async def _check_cold_copy(self, cold: Backend, agent_id: str) -> None:
        """Refuse (:class:`~statekeeper.errors.ConfigurationError`) to replace a copy of
        ``agent_id`` in the cold tier that is not this store's (:meth:`_own_copy`): a
        copy a crashed demotion or rehydration left is; another store's demotion of an
        agent of that id (two tiered stores sharing one cold tier) is not — replacing it
        deleted that store's only copy of its agent, and that store's next load served
        this one's."""
        held = await cold.head(agent_id)
        if held == 0 or await self._own_copy(cold, agent_id, None):
            return
        raise ConfigurationError(
            f"the cold tier {cold!r} holds agent {agent_id!r} (head {held}) that is not a"
            " copy of this store's stream: another store sharing the cold tier demoted an"
            " agent of that id, and replacing it would delete that store's only copy; give"
            " each tiered store a cold tier of its own (another bucket prefix). Or it is the"
            " copy of an agent of that id this store deleted, left there when deleting it"
            " from the cold tier failed (that delete said so): if no other store shares the"
            " cold tier, delete it from the cold tier alone (`statekeeper delete <the cold"
            f" tier's URL> {agent_id!r}`) and demote again. Nothing was demoted"
        )

    async def _drop_orphan(self, cold: Backend, agent_id: str, wrote: list[RawEvent]) -> None:
        """After a demotion's copy or its last step failed: if the agent was deleted
        meanwhile (its marker, the claim, and its stream gone — the delete took the part
        copied by then, or ended the claim before the copy was whole), delete what this
        demotion copied after that delete, no marker naming it: a cold copy
        whose head record is one this demotion wrote (``wrote``: the last record of each
        page it appended; the checksum binds the records before it), by a delete
        conditional on it. Was: a copy whose *first* record was this stream's — another
        store's sharing the cold tier whose agent shares that first record (a store
        restored from a backup of this one, written on since) demoted meanwhile was
        deleted, its only copy."""
        marker_id = COLD_MARKER + agent_id
        if await self.durable.head(marker_id) or await self.durable.head(agent_id):
            return
        held = await cold.head(agent_id)
        ours = next((e for e in wrote if e.seq == held), None)
        if ours is None:
            return
        copied = await cold.read(agent_id, held - 1, held)
        if copied and same_record(copied[0], ours):
            with contextlib.suppress(ConflictError):
                await cold.delete_agent_at(agent_id, held, ours.checksum)

    async def _moved(self, agent_id: str, head: int, last: RawEvent) -> bool:
        """Is the durable stream no longer the one a demotion read (``head``, its head
        record ``last``)?"""
        if await self.durable.head(agent_id) != head:
            return True
        return await self.durable.head_checksum(agent_id, head) != last.checksum
