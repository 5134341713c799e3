"""Bringing a demoted agent back (*rehydration*) in
:class:`~statekeeper.backends.tiered.TieredBackend`, and what makes every first use of
an agent in a process look at its cold marker: the part an interrupted rehydration
copied is never read as the agent (the *settled* memo of agents seen without one)."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import BackendError, ConflictError, IntegrityError
from ..records import AgentInfo, RawEvent, RewriteRequest, StreamChange
from .base import Backend, takes_rename_guard
from .tiered_claims import COLD_MARKER, TieredClaims, is_claim, is_internal
from .tiered_cold import check_demoted_copy
from .tiered_copy import copy_stream
from .tiered_ending import announce_end, announces_ends, ending_absent, withdraw_end
from .tiered_owner import IN_FLIGHT

__all__ = ["TieredRehydrate"]

_T = TypeVar("_T")

logger = logging.getLogger("statekeeper.backends.tiered")

#: how many times one rehydration looks again — its copy dropped by another's, the
#: marker changed or the agent deleted under it — before it gives up (two rehydrations,
#: each dropping the part the other copied, do not go on for ever; nor does one whose
#: agent another process keeps deleting, or whose marker keeps changing)
_ATTEMPTS = 8

#: the most agents ``_settled`` remembers: a memo, one forgotten costs one marker read
#: at its next use (it is a first use again)
_SETTLED_MAX = 65536


class TieredRehydrate(TieredClaims):
    """The rehydration part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    async def _durable_head(self, agent_id: str) -> int:
        head = await self.durable.head(agent_id)
        if head == 0 and self.cold is not None:
            head = await self._rehydrate(agent_id)
        elif self.cold is not None and head < self._settled.get(agent_id, head + 1):
            head = await self._first_use(agent_id, head)
        elif self.cold is not None:
            self._settle_at(agent_id, head)
        return head

    def _settle_at(self, agent_id: str, head: int) -> None:
        """``agent_id`` is settled here, its durable head seen at ``head``."""
        self._set_settled(agent_id, max(head, self._settled.get(agent_id, 0)))

    def _set_settled(self, agent_id: str, head: int) -> None:
        """Remember ``agent_id`` settled at ``head``. Bounded: all forgotten when full,
        each then a first use again (its marker read once more). Was: one entry per
        agent a process ever touched, for the life of the worker (h/trialsoak: 50k
        agents written once, 50k entries)."""
        settled = self._settled
        if agent_id not in settled and len(settled) >= _SETTLED_MAX:
            settled.clear()
        settled[agent_id] = head

    async def _settle(self, agent_id: str) -> None:
        """Before this process first reads ``agent_id``: its cold marker is looked at (see
        :meth:`_first_use`), so a rehydration's part is never what the read returns."""
        if self.cold is not None and agent_id not in self._settled:
            await self._durable_head(agent_id)

    async def _first_use(self, agent_id: str, head: int, *, locked: bool = False) -> int:
        """The agent's durable head, after this process's first look at its cold marker:
        a stream below the marker's head is what an interrupted rehydration copied
        (a process killed part way), never the whole agent — it is copied again. A
        marker at or below the stream's head (a demotion under way in another process,
        or one that died before its last step) is left to that demotion."""
        if head == 0:
            return await self._rehydrate(agent_id, locked=locked)
        marker = await self._marker(agent_id)
        if marker is None:
            self._set_settled(agent_id, head)  # (a stream deleted and written again: lower)
        elif head < marker.head_seq:
            return await self._rehydrate(agent_id, locked=locked)
        return head

    async def _rehydrate(self, agent_id: str, *, locked: bool = False, attempt: int = 0) -> int:
        """Bring a demoted agent back to the durable tier; its head, or 0 if not demoted.

        ``locked``: the caller holds the agent's lock already; ``attempt``: how many
        times this call looked again (:meth:`_again`, :data:`_ATTEMPTS`).
        """
        cold = self.cold
        if cold is None or is_internal(agent_id):
            return 0
        marker_id = COLD_MARKER + agent_id
        if await self.durable.head(marker_id) == 0:
            if agent_id not in self._settled:
                self._set_settled(agent_id, 0)
            return 0
        if not locked:
            await self._locks.acquire(agent_id)
        ours: dict[str, Any] | None = None
        try:
            entry = await self._marker_entry(agent_id)
            if entry is None:  # rehydrated meanwhile
                head = await self.durable.head(agent_id)
                self._set_settled(agent_id, head)
                return head
            marker, body = entry
            head = await self.durable.head(agent_id)
            if head >= marker.head_seq or is_claim(body):
                # a demotion's marker beside the whole stream: its claim, the demotion under
                # way in another process (its copy, then its conditional delete of the
                # stream) or dead before its end. Not
                # a rehydration's to end: deleting the marker and the cold copy here while
                # the demotion went on deleted the stream too — the agent lost everywhere
                # (another process's create of it, conflicting, did that). Nor is a claim
                # beside less (:func:`is_claim`): the stream deleted under it, the
                # agent deleted — was brought back from the claim's whole cold copy. Nor a
                # rehydration's claim beside the whole stream: its end is its own (or, it
                # killed, its claim's to take over: :meth:`_take_over`)
                return head
            if head == 0 and await self._end_deleted(cold, agent_id, entry):
                return await self._again(agent_id, attempt, "its marker changed")
            # this rehydration's claim, before anything is written: the end is the
            # claim's owner's (None: another's claim, or a tier whose claims name none)
            ours = await self._claim_rehydration(agent_id, body)
            if (
                ours is None
                and self._fenced()
                and not body.get("rehydrating")
                and await self._marker_entry(agent_id) != entry
            ):  # the marker changed meanwhile (another's claim, or gone): look again
                return await self._again(agent_id, attempt, "its marker changed")
            if ours is None and not self._fenced():
                ours = body  # (the marker's: its end is the one that copies back, as ever)
            if head > 0:
                # the part an interrupted rehydration copied (the cold tier still holds
                # the whole stream): copied again from the start, never taken as all
                await self._drop_partial(agent_id, marker.head_seq)
                head = await self.durable.head(agent_id)
                if head >= marker.head_seq:
                    # that rehydration finished its copy meanwhile: its end (the cold copy
                    # and the marker deleted) is its own. Was: ended here too — with that
                    # one's end and a demotion since in between, that demotion's cold copy
                    # and marker were deleted, then its delete of the stream went through.
                    # But for this one's claim: the end is this one's (see below)
                    await self._end_for_another(cold, agent_id, marker.head_seq, ours)
                    return head
            if head == 0:
                await check_demoted_copy(cold, agent_id, body)
                wrote: list[RawEvent] = []
                # another's claim: each page copied only while it holds (its own claim's
                # copy needs no such check: only a delete ends it, see _deleted_under)
                theirs = body if ours is None else None
                try:
                    await copy_stream(
                        cold,
                        self.durable,
                        agent_id,
                        marker.head_seq,
                        all_snapshots=True,
                        wrote=wrote,
                        guard=None if theirs is None else self._guard(agent_id, theirs),
                    )
                except (ConflictError, IntegrityError) as exc:
                    again = await self._marker_entry(agent_id)
                    if await self._deleted_under(
                        agent_id, ours, again, wrote
                    ) or await self._deleted_under_theirs(agent_id, theirs, again, wrote, marker):
                        return await self._again(agent_id, attempt, "it was deleted") or (
                            await self.durable.head(agent_id)
                        )
                    head = await self.durable.head(agent_id)
                    if again is None or (again[1] in (ours, theirs) and head >= marker.head_seq):
                        # another process brought it back meanwhile (and deleted the
                        # cold copy read here; or left the end to this one's claim; or,
                        # the claim's owner, copied it whole first, its end to come):
                        # the agent is its copy, nothing is wrong. Was, for the last:
                        # this load raised ConflictError (the agent whole)
                        if again is not None:
                            await self._end_for_another(cold, agent_id, marker.head_seq, ours)
                        self._set_settled(agent_id, head)
                        return head
                    mine = again[1] in (ours, theirs)
                    broken = (
                        mine
                        and isinstance(exc, IntegrityError)
                        and await self._cold_intact(cold, agent_id, again[1])
                    )  # (the cold copy itself, unchanged under this one: not a race)
                    if broken or attempt >= _ATTEMPTS:
                        with contextlib.suppress(Exception):  # (else the next use drops it)
                            await self._drop_partial(agent_id, marker.head_seq)
                    if broken:
                        raise
                    if not mine:
                        # another marker since (a claim, another demotion's): looked at
                        # again, as before the copy (BackendError, try again, after
                        # _ATTEMPTS). Was: this failure raised to the load or write — a
                        # ConflictError naming a page or the marker's stream, for a
                        # load that conflicted on nothing
                        return await self._again(agent_id, attempt, "its marker changed")
                    # the claim holds and the stream is a part: another rehydration
                    # (the claim's owner, or one that found it) dropped what this one
                    # copied and copies its own — this one starts again (and ends its
                    # own claim once the agent is whole); BackendError (try again) after
                    # _ATTEMPTS. Was: both loads raised ConflictError ("its head record
                    # was rewritten since this process read it…"), each having dropped
                    # the other's part; and, the bound reached, that ConflictError
                    head = await self._again(agent_id, attempt, "its copy was dropped")
                    await self._end_for_another(cold, agent_id, marker.head_seq, ours)
                    return head
                except BaseException:
                    with contextlib.suppress(Exception):  # (else the next use drops it)
                        await self._drop_partial(agent_id, marker.head_seq)
                    raise
                if await self._deleted_under(
                    agent_id, ours, await self._marker_entry(agent_id), wrote
                ):
                    return await self._again(agent_id, attempt, "it was deleted") or (
                        await self.durable.head(agent_id)
                    )
                head = marker.head_seq
            elif head < marker.head_seq:
                raise IntegrityError(
                    agent_id, marker.head_seq, f"a partial copy at {head} could not be dropped"
                )
            # the cold copy first: a process killed between the two leaves the marker
            # beside the whole stream (harmless: see above), never a cold copy no marker
            # claims (a deleted agent's data kept, and a later demotion of the id refused).
            # Both only while they are what this rehydration copied and the marker it read:
            # a delete of the agent, then a demotion of a new one of that id, meanwhile
            # made another (its copy and claim, deleted here, and its stream by it). Not
            # while another rehydration's claim is the marker: the end is its owner's
            if ours is not None:
                await self._drop_copied(cold, agent_id, head, ours)
            self._set_settled(agent_id, head)
            self.stats["rehydrations"] += 1
            logger.info("rehydrated agent %r (head %d) from the cold tier", agent_id, head)
            return head
        finally:
            if ours is not None:
                IN_FLIGHT.discard(bytes.fromhex(ours["_token"]))
            if not locked:
                self._locks.release(agent_id)

    def _changes_with_claim_check(self) -> bool:
        """Does the durable tier commit a prune or a rewrite with a check of the agent's
        marker (that change and a check of another stream, no append, in one commit)?
        SQLite, memory, PostgreSQL and Redis (not a cluster: no ``append_together``)."""
        durable = self.durable
        return (
            self._fenced()
            and durable.changes_alone_together
            and durable.prunes_together_at_head
            and durable.checks_absence_together
            and durable.changes_leases_and_rewrites
        )

    def _renames_with_claim_check(self) -> bool:
        """Does the durable tier commit a key rename with a check of the agent's marker
        (``rename_keys(..., guard=...)``: SQLite, memory, PostgreSQL and Redis, not a
        cluster)?"""
        durable = self.durable
        return (
            self._fenced()
            and takes_rename_guard(durable)
            and durable.checks_absence_together
            and durable.changes_leases_and_rewrites
        )

    def _together_with(self, change: StreamChange) -> Callable[[StreamChange], Awaitable[Any]]:
        """The commit of ``change`` (a prune or a rewrite) with a check of the marker
        (:meth:`_change_checked`'s ``commit``): one ``append_together`` of changes
        alone — the agent's change first: PostgreSQL locks its row before the
        marker's, as a demotion's last step does (no deadlock between them)."""

        async def commit(check: StreamChange) -> Any:
            return await self.durable.append_together([], [change, check])

        return commit

    async def _change_checked(
        self, agent_id: str, commit: Callable[[StreamChange], Awaitable[_T]]
    ) -> _T:
        """Make a change of ``agent_id`` (a prune, a rewrite, a key rename) in the
        durable tier in ONE commit with a check of its cold marker: ``commit(check)``
        (its result returned), where the tier can (:meth:`_changes_with_claim_check`,
        :meth:`_renames_with_claim_check`: the caller asks; :class:`BackendError`,
        nothing done, once the marker changed under each
        of :data:`_ATTEMPTS` checks): no marker (a claim made since fails the commit:
        looked at again), or a demotion's claim (:func:`is_claim`) given another head
        tag in that same commit — its last step, committed only while the marker carries
        its token, then deletes nothing and its clean-up removes its copy of the stream
        as it was —, or a marker beside the whole stream unchanged. A demotion done
        meanwhile: the agent brought back first. Was: the claim looked at before the
        change and after it, neither in its commit — a demotion that claimed after the
        first look, copied the stream before the change and made its last step before
        the second deleted the changed stream, its cold copy (the history back, a
        rewrite's old bytes, a rename's old key names) the agent at the next load."""
        marker_id = COLD_MARKER + agent_id
        for _ in range(_ATTEMPTS):  # (each turn: the marker changed since its look)
            entry = await self._marker_entry(agent_id)
            seq, tag = await self.durable.head_tag(marker_id)
            if entry is None and seq == 0:
                check = StreamChange(marker_id, absent=True)
            elif entry is None or seq != entry[1]["_seq"]:
                continue  # (changed between the two reads)
            elif is_claim(entry[1]):
                fence = RewriteRequest(marker_id, seq, tag, head_tag=secrets.token_bytes(16))
                check = StreamChange(marker_id, rewrite=fence)
            elif await self.durable.head(agent_id) < entry[0].head_seq:
                await self._rehydrate(agent_id, locked=True)  # (demoted meanwhile)
                continue
            else:  # (a marker beside the whole stream: left as it is, checked)
                check = StreamChange(marker_id, rewrite=RewriteRequest(marker_id, seq, tag))
            try:
                return await commit(check)
            except ConflictError as exc:
                if exc.agent_id != marker_id:
                    raise
                continue
        # never the change unchecked: the one a demotion whose last step commits
        # meanwhile undoes. Was: the change made unchecked after all (no error)
        raise BackendError(
            f"tiered: agent {agent_id!r} was not changed: its cold marker changed under"
            f" each of its {_ATTEMPTS} checks (other processes demoting or bringing it back"
            " meanwhile); nothing was changed: try again"
        )

    async def _again(self, agent_id: str, attempt: int, why: str) -> int:
        """(Holding the agent's lock, in :meth:`_rehydrate`.) Look again — the agent's
        head, as :meth:`_rehydrate` — after another process changed the agent under this
        rehydration (``why``); :class:`BackendError` once it looked again
        :data:`_ATTEMPTS` times. Was: looked again for as long as the change came back
        (another process deleting the agent, or changing its marker, each time), never
        passing its count on — the load or write spun, or ended in a RecursionError."""
        if attempt >= _ATTEMPTS:
            raise BackendError(
                f"tiered: agent {agent_id!r} was not brought back from the cold tier: "
                f"{why} under each of its {_ATTEMPTS + 1} tries (other processes "
                "rehydrating, deleting or demoting it meanwhile): try again"
            )
        return await self._rehydrate(agent_id, locked=True, attempt=attempt + 1)

    async def _cold_intact(self, cold: Backend, agent_id: str, body: dict[str, Any]) -> bool:
        """Is the cold copy the marker ``body`` names still there, whole? (A copy back
        that failed on it, an :class:`IntegrityError`, then failed on the copy itself —
        a gap, a record unreadable — not on another process deleting it meanwhile.)"""
        try:
            await check_demoted_copy(cold, agent_id, body)
        except IntegrityError:
            return False
        return True

    async def _deleted_under(
        self,
        agent_id: str,
        ours: dict[str, Any] | None,
        entry: tuple[AgentInfo, dict[str, Any]] | None,
        wrote: list[RawEvent],
    ) -> bool:
        """Was the agent deleted while this rehydration copied it back under its claim
        (``ours``), the marker now ``entry``? Then what it copied (``wrote``: the last
        record of each page) is dropped — a delete conditional on its last record, so a
        write on top of it is kept — and True (the caller looks again). On a tier whose
        claims name an owner only a delete ends a live process's claim (a takeover needs
        its process gone). Was: the copy stayed — the deleted agent back whole, or the
        part copied before the cold copy went served as the agent."""
        if ours is None or not self._fenced() or (entry is not None and entry[1] == ours):
            return False
        if wrote:
            last = wrote[-1]
            with contextlib.suppress(ConflictError):  # (gone already, or written on)
                await self.durable.delete_agent_at(agent_id, last.seq, last.checksum)
        logger.warning(
            "agent %r was deleted while this process brought it back: what it copied is dropped",
            agent_id,
        )
        return True

    def _guard(self, agent_id: str, claim: dict[str, Any]) -> StreamChange | None:
        """The check each page a rehydration that found another's claim copies back is
        committed with (:func:`~.tiered_copy.copy_stream`): the marker still ``claim``,
        by a rewrite of nothing at that head and tag.
        None where the durable tier cannot (not :meth:`_fenced`, or no rewrite in
        ``append_together``), or the marker is no rehydration's claim."""
        durable = self.durable
        if (
            not claim.get("rehydrating")
            or not self._fenced()
            or not durable.changes_leases_and_rewrites
        ):
            return None
        marker_id = COLD_MARKER + agent_id
        held = RewriteRequest(marker_id, claim["_seq"], bytes.fromhex(claim["_token"]))
        return StreamChange(marker_id, rewrite=held)

    async def _deleted_under_theirs(
        self,
        agent_id: str,
        theirs: dict[str, Any] | None,
        entry: tuple[AgentInfo, dict[str, Any]] | None,
        wrote: list[RawEvent],
        marker: AgentInfo,
    ) -> bool:
        """:meth:`_deleted_under` for a rehydration that found another's claim
        (``theirs``) and copied under it (each page committed only while it holds:
        :meth:`_guard`): the marker no longer that claim and the stream not whole is a
        delete of the agent — that claim's owner ends it only beside the whole stream
        (so does a takeover). What this one copied after the delete is dropped
        (conditional on its last record) and True. Was: a page read before the delete
        landed after it, on no stream — the deleted agent back whole (one page), or the
        part copied served as the agent, no marker beside it (the next page's read
        found the cold copy gone)."""
        if theirs is None or self._guard(agent_id, theirs) is None:
            return False
        if entry is not None and entry[1] == theirs:
            return False
        if await self.durable.head(agent_id) >= marker.head_seq:
            return False  # (brought back whole: that claim's owner ended it)
        return await self._deleted_under(agent_id, theirs, entry, wrote)

    async def _end_for_another(
        self, cold: Backend, agent_id: str, head: int, ours: dict[str, Any] | None
    ) -> None:
        """The end of this rehydration's claim (``ours``) when another process (one that
        found the claim and so leaves the end to it) copied the agent back whole first
        (at ``head``, the demoted head). Was: this one returned without its end, and
        nobody else ends a live process's claim — the marker and the cold copy stayed
        beside the stream, the agent not demoted again while this process lived.
        Nothing on a tier whose claims name no owner (``ours`` is then the marker read:
        that end is the copying one's, as ever). Only while the marker is still that
        claim: a delete of the agent ends it, and a new agent of that id, as long, may be
        under a demotion since — its whole cold copy is not this one's to delete (that
        demotion's last step then deleted the stream: the new agent lost)."""
        if ours is None or not self._fenced():
            return
        entry = await self._marker_entry(agent_id)
        if entry is not None and entry[1] == ours:
            await self._drop_copied(cold, agent_id, head, ours)

    async def _drop_copied(
        self, cold: Backend, agent_id: str, head: int, body: dict[str, Any]
    ) -> None:
        """A rehydration's end: the cold copy it copied back (at ``head``, the head
        record the durable copy has), then the marker (``body``: its claim, or the
        marker it read), conditional on that record."""
        checksum = await self.durable.head_checksum(agent_id, head)
        ending: bytes | None = None
        if body.get("rehydrating") and announces_ends(self.durable):
            # announced while the marker is still this claim (tiered_ending): a demotion
            # since makes no last step over the copy deleted here. Not announced: the
            # claim ended by a delete (a copy there now is another's): nothing deleted
            ending = await announce_end(self.durable, agent_id, body, self.clock())
            if ending is None and await ending_absent(self.durable, agent_id, self.clock):
                # (the one there was a dead process's, older than CLAIM_STALE: deleted)
                ending = await announce_end(self.durable, agent_id, body, self.clock())
            if ending is None:
                return
        try:
            if checksum is not None:  # (None: deleted meanwhile, its cold copy first)
                with contextlib.suppress(ConflictError):
                    await cold.delete_agent_at(agent_id, head, checksum)
            with contextlib.suppress(ConflictError):
                await self._delete_marker(agent_id, body)
        finally:
            if ending is not None:
                await withdraw_end(self.durable, agent_id, ending)

    async def _drop_partial(self, agent_id: str, marker_head: int) -> None:
        """Delete what an interrupted rehydration copied into the durable tier (a part
        of the stream the cold tier holds whole), if that is what is there."""
        head = await self.durable.head(agent_id)
        if 0 < head < marker_head and self.cold is not None:
            # only the copy's own records: the head event must be the cold copy's at
            # that seq (an append acknowledged on top of a part — by a process that read
            # it as the agent — was deleted with it)
            copied = await self.cold.read(agent_id, head - 1, head)
            if not copied or copied[0].seq != head:
                return
            with contextlib.suppress(ConflictError):  # moved: the caller looks again
                await self.durable.delete_agent_at(agent_id, head, copied[0].checksum)
