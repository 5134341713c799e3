"""Demotion in :class:`~statekeeper.backends.tiered.TieredBackend`: moving idle agents to
the cold tier under a claim (:mod:`.tiered_claims`), copy first, the durable stream
deleted last and only while the claim is its own; and the background demotion loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

import orjson

from ..errors import ConfigurationError, ConflictError, IntegrityError, StoreClosed
from ..records import AppendRequest, RawEvent, StreamChange
from .base import Backend
from .tiered_base import PAGE
from .tiered_claims import COLD_MARKER, TieredClaims, is_internal
from .tiered_cold import record_digest
from .tiered_copy import copy_stream
from .tiered_ending import ENDING, announces_ends, ending_absent, ending_check
from .tiered_hot import TieredHot
from .tiered_owner import IN_FLIGHT, claim_owner
from .tiered_unfenced import same_base

__all__ = ["TieredDemote"]

logger = logging.getLogger("statekeeper.backends.tiered")


class TieredDemote(TieredClaims, TieredHot):
    """The demotion part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    async def demote_idle(self, now: float | None = None) -> list[str]:
        """Demote every agent idle longer than ``idle_after``; returns their ids."""
        self._check_can_write()
        if self.cold is None or self.idle_after is None:
            return []
        cutoff = (self.clock() if now is None else now) - self.idle_after
        idle: list[str] = []
        after: str | None = None
        while True:
            page = await self.durable.list_agents(after=after, limit=PAGE)
            for info in page:
                if is_internal(info.agent_id):
                    continue
                if info.updated_at < cutoff and self._last_used.get(info.agent_id, 0.0) < cutoff:
                    idle.append(info.agent_id)
            if len(page) < PAGE:
                break
            after = page[-1].agent_id
        demoted = []
        for agent_id in idle:
            if await self.demote(agent_id):
                demoted.append(agent_id)
        return demoted

    async def demote(self, agent_id: str) -> bool:
        """Move one agent to the cold tier now. False if it has no durable stream, if
        another demotion of it holds the claim (its marker), or if it was written to
        meanwhile (the write is kept).

        The marker's creation is the claim: a conditional insert (expected seq 0) whose
        record carries a token of this demotion's own, made before the cold tier is
        touched. Another demotion of the agent (another process's: every process's
        demotion loop finds the same idle agents) that finds a marker backs off without
        a write; a demotion deletes only the cold copy and the marker it wrote itself,
        and its delete of the durable stream is conditional on the head record it copied
        — and, where the durable tier commits several streams at once, made in one
        commit with the marker's second record (the demotion done), conditional on the
        claim still being its own: so a claim whose demotion was killed is taken over
        (:meth:`_take_over`) without letting the owner, were it still alive, delete the
        stream under the new claim.
        """
        self._check_can_write()
        cold = self.cold
        if cold is None:
            raise ConfigurationError("no cold tier to demote to")
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            head = await self.durable.head(agent_id)
            entry = await self._marker_entry(agent_id)
            if head == 0:
                if entry is not None:  # (what a delete left, if that: ended)
                    await self._end_deleted(cold, agent_id, entry)
                return False
            if entry is not None and not await self._take_over(agent_id, entry, head):
                return self._claimed(agent_id)
            first = await self.durable.read(agent_id, 0, None, limit=1)
            last = await self.durable.read(agent_id, head - 1, head)
            if not first or not last:
                raise IntegrityError(agent_id, head, "stream ends before its head")
            token = secrets.token_bytes(16)
            fenced = self._fenced()
            body = orjson.dumps(
                {
                    "head": head,
                    "created": first[0].timestamp,
                    "updated": last[0].timestamp,
                    "last": record_digest(last[0]),
                }
                | ({"claimed": self.clock(), "owner": claim_owner()} if fenced else {})
            )  # ("last": the demoted head's digest, checked again by a rehydration)
            IN_FLIGHT.add(token)
            try:
                return await self._demote_claimed(
                    cold, agent_id, head, (first[0], last[0]), token, body
                )
            finally:
                IN_FLIGHT.discard(token)

    async def _demote_claimed(
        self,
        cold: Backend,
        agent_id: str,
        head: int,
        ends: tuple[RawEvent, RawEvent],
        token: bytes,
        body: bytes,
    ) -> bool:
        """:meth:`demote` from its claim on (``token``; ``body`` the marker's)."""
        marker_id = COLD_MARKER + agent_id
        fenced = self._fenced()
        try:
            await self.durable.append(
                AppendRequest(
                    marker_id,
                    0,
                    (RawEvent(1, "cold", self.clock(), body, token),),
                    head_tag=token if fenced else None,
                )
            )
        except ConflictError:
            return self._claimed(agent_id)  # another demotion claimed it first
        if not await self._copy_claimed(cold, agent_id, head, ends, token):
            return False
        last = ends[1]
        try:  # conditional: a write meanwhile (another process's) is kept, not deleted,
            # and so is a rewrite (a migration, a rekey) to the same head
            if fenced:  # and only while the claim is its own (not taken over)
                checks = await self._no_end_under(cold, agent_id, head, last)
                done = RawEvent(2, "cold", self.clock(), body, token)
                await self.durable.append_together(
                    [
                        AppendRequest(
                            marker_id,
                            1,
                            (done,),
                            head_tag=token,
                            expected_tag=token,
                            check_tag=True,
                        )
                    ],
                    [
                        StreamChange(agent_id, delete_at=head, delete_checksum=last.checksum),
                        *checks,
                    ],
                )
            else:  # (only while the stream's base is the copy's: a prune since kept)
                if not await same_base(self.durable, cold, agent_id):
                    raise ConflictError(agent_id, head, head)
                await self.durable.delete_agent_at(agent_id, head, last.checksum)
        except ConflictError:
            # the stream written to, or deleted, meanwhile, or changed in place (its
            # marker fenced by the change: _fence_demotion): its claim ended (its own
            # copy, then its marker, both conditional, and only while the marker is its
            # own — not once taken over). Was: only if the stream was still there — a
            # delete that read no marker (this claim came after) left the claim and its
            # whole copy beside no stream, and the next load took the agent for demoted
            # and brought the deleted agent back
            await self._release(cold, agent_id, token, (head, last.checksum))
            # the agent deleted, its claim ended by that delete (which read the copy before
            # it was whole: not its to delete): this demotion's whole copy, no marker nor
            # stream beside it, is dropped. Was: kept — the deleted agent's data in the
            # cold tier, and a demotion of a new agent of that id refused
            await self._drop_orphan(cold, agent_id, [last])
            return False  # (the marker's: its claim taken over, left to the new one)
        if self.hot is not None:
            await self._drop_hot(agent_id)
        self._last_used.pop(agent_id, None)
        self._settled.pop(agent_id, None)  # (its next use here looks at the marker again)
        self.stats["demotions"] += 1
        logger.info("demoted agent %r (head %d) to the cold tier", agent_id, head)
        return True

    async def _no_end_under(
        self, cold: Backend, agent_id: str, head: int, last: RawEvent
    ) -> list[StreamChange]:
        """Before a demotion's last step, where the durable tier can (``tiered_ending``):
        no rehydration's end announced (looked at first), then its cold copy still whole
        (at ``head``, its head record ``last``) — else :class:`ConflictError`, the step
        not made (its clean-up ends its claim). The step's check of that absence (its
        changes). Was: a rehydration's late end (its claim looked at before this claim
        was made) deleted this copy, then this step deleted the stream: the agent lost."""
        if not announces_ends(self.durable):
            return []
        if not await ending_absent(self.durable, agent_id, self.clock):
            raise ConflictError(ENDING + agent_id, 0, 1)
        if await cold.head_checksum(agent_id, head) != last.checksum:
            raise ConflictError(agent_id, head, await cold.head(agent_id))
        return [ending_check(agent_id)]

    async def _copy_claimed(
        self,
        cold: Backend,
        agent_id: str,
        head: int,
        ends: tuple[RawEvent, RawEvent],
        token: bytes,
    ) -> bool:
        """Copy the claimed agent (at ``head``, its first and head records ``ends``) into
        the cold tier: True; or release the claim (:meth:`_release`) and return False if
        the stream was written to (or deleted) meanwhile, else raise."""
        last = ends[1]
        try:
            await self._check_cold_copy(cold, agent_id)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._release(None, agent_id, token)  # (not its copy: left alone)
            raise
        wrote: list[RawEvent] = []
        try:
            await cold.delete_agent(agent_id)  # an older archive copy of this stream
            await copy_stream(self.durable, cold, agent_id, head, all_snapshots=True, wrote=wrote)
            if await cold.head(agent_id) != head:
                raise IntegrityError(agent_id, head, "cold copy is incomplete")
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self._release(cold, agent_id, token)
                await self._drop_orphan(cold, agent_id, wrote)
            if isinstance(exc, ConflictError | IntegrityError) and await self._moved(
                agent_id, head, last
            ):
                return False  # written or deleted meanwhile: not demoted, nothing lost
            raise
        return True

    async def _maintain(self) -> None:
        assert self.demote_interval is not None
        while not self._closed:
            await asyncio.sleep(self.demote_interval)
            try:
                await self.demote_idle()
            except StoreClosed:
                return
            except Exception:  # keep the loop alive; the next round retries
                logger.exception("demoting idle agents failed")
