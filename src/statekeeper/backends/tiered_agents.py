"""The agents a :class:`~statekeeper.backends.tiered.TieredBackend` holds across its
tiers: listings and counts (a demoted agent is its marker, listed and counted once), and
the calls over every agent that must touch only this store's own demoted copies in a
cold tier other stores may share (``expire_keys``, ``drop_all``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from ..errors import IntegrityError, StatekeeperError
from ..records import AgentInfo
from .base import Backend, Capability, check_expiry
from .tiered_base import PAGE
from .tiered_claims import COLD_MARKER, MARKER_CEIL, TieredClaims, is_claim, is_marker
from .tiered_cold import check_demoted_copy, head_is_demoted, marker_body
from .tiered_ending import ENDING

__all__ = ["TieredAgents"]

logger = logging.getLogger("statekeeper.backends.tiered")


def _own(agent_id: str) -> bool:
    """A durable stream of the tiered store's own, listed as no agent: a marker, an
    announced end (:mod:`.tiered_ending`)."""
    return is_marker(agent_id) or agent_id.startswith(ENDING)


class TieredAgents(TieredClaims):
    """The listing part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        self._check_open()
        if limit <= 0:
            return []
        live: list[AgentInfo] = []
        cursor = after
        while len(live) < limit:
            want = limit - len(live)
            page = await self.durable.list_agents(after=cursor, limit=want)
            live.extend(info for info in page if not _own(info.agent_id))
            if len(page) < want:
                break
            last = page[-1].agent_id
            cursor = MARKER_CEIL if is_marker(last) else last
        if self.cold is None:
            return live[:limit]
        demoted = await self._demoted(after, limit)
        merged: dict[str, AgentInfo] = {info.agent_id: info for info in demoted}
        for info in live:  # durable wins, but for the part of an interrupted rehydration
            if info.agent_id not in merged or info.head_seq >= merged[info.agent_id].head_seq:
                merged[info.agent_id] = info
        return [merged[k] for k in sorted(merged)][:limit]

    async def _demoted(self, after: str | None, limit: int) -> list[AgentInfo]:
        """The first ``limit`` agents after ``after`` the markers list (a claim, no agent
        of its own, passed over). Read on past the claims: was, from the first ``limit``
        markers only — the demoted agents after claims that stand for no agent (beside
        no stream) were cut off the page while live agents sorting after them filled
        it, and the next page, after those, never listed them (a backup left them out)."""
        cursor = COLD_MARKER + after if after is not None else COLD_MARKER
        out: list[AgentInfo] = []
        while len(out) < limit:
            page = await self.durable.list_agents(after=cursor, limit=limit)
            for info in page:
                if not is_marker(info.agent_id):
                    return out
                entry = await self._marker_entry(info.agent_id[len(COLD_MARKER) :])
                if entry is not None and not is_claim(entry[1]):
                    out.append(entry[0])
            if len(page) < limit:
                return out
            cursor = page[-1].agent_id
        return out

    async def count_agents(self) -> int:
        """Each agent once, as :meth:`list_agents` lists them: a demoted agent is its
        marker, and a marker a crash left beside a durable stream (a demotion that died
        before its last step, the part a killed rehydration copied) is not a second
        agent, nor a demotion's claim beside no stream (the agent deleted under it)."""
        self._check_open()
        count = await self.durable.count_agents()
        if self.cold is None:
            return count
        return count - await self._doubled("") - await self._endings("")

    async def _endings(self, prefix: str) -> int:
        """The announced ends of rehydrations (:mod:`.tiered_ending`) the durable tier
        counts under ``prefix``: none but one a process killed in its end left."""
        if not ENDING.startswith(prefix) and not prefix.startswith(ENDING):
            return 0
        return await self.durable.count_prefix(ENDING if ENDING.startswith(prefix) else prefix)

    async def _doubled(self, prefix: str) -> int:
        """Markers of agents under ``prefix`` the durable tier counts that are no agent
        of their own (:meth:`list_agents` skips them): beside a durable stream (its
        agent counted already), or a demotion's claim (:func:`is_claim`) or an
        unreadable marker beside none. One listing of the markers, two batches of head
        reads per page of them."""
        start = COLD_MARKER + prefix
        doubled = 0
        after = start
        if prefix and await self.durable.head(start) > 0:  # (listings start after it)
            doubled += await self._not_agents([start])
        while True:
            page = await self.durable.list_agents(after=after, limit=PAGE)
            markers = [info.agent_id for info in page if info.agent_id.startswith(start)]
            if markers:
                doubled += await self._not_agents(markers)
            if len(markers) < PAGE:
                return doubled
            after = page[-1].agent_id

    async def _not_agents(self, markers: list[str]) -> int:
        """How many of ``markers`` (durable marker ids) :meth:`list_agents` lists no
        agent for: a durable stream beside it (the agent listed once, from it), or a
        claim or unreadable marker beside none (see :meth:`_demoted`)."""
        heads = await self.durable.read_heads([m[len(COLD_MARKER) :] for m in markers])
        bodies = await self.durable.read_heads(markers)
        out = 0
        for head, mark in zip(heads, bodies, strict=True):
            if head is not None:
                out += 1
                continue
            if mark is None:  # (deleted meanwhile: left as the durable tier counted)
                continue
            body = marker_body([mark])
            out += body is None or is_claim(body | {"_seq": mark.seq})
        return out

    async def count_prefix(self, prefix: str) -> int:
        """Agents whose id starts with ``prefix``, demoted ones included: a demoted
        agent is its marker in the durable tier, counted under the marker's own prefix
        (a namespaced store's count used to leave every demoted agent out)."""
        self._check_open()
        count = await self.durable.count_prefix(prefix)
        if self.cold is None:
            return count
        count -= await self._endings(prefix)
        if COLD_MARKER.startswith(prefix):  # (the markers are under that prefix already)
            return count - await self._doubled("") if prefix == "" else count
        markers = await self.durable.count_prefix(COLD_MARKER + prefix)
        return count + markers - (await self._doubled(prefix) if markers else 0)

    async def _demoted_ids(self) -> list[str]:
        """The ids of every agent this store's durable markers say it demoted."""
        out: list[str] = []
        after = COLD_MARKER
        while True:
            page = await self.durable.list_agents(after=after, limit=PAGE)
            out += [i.agent_id[len(COLD_MARKER) :] for i in page if is_marker(i.agent_id)]
            if len(page) < PAGE or not is_marker(page[-1].agent_id):
                return out
            after = page[-1].agent_id

    async def _own_demoted_copies(self, cold: Backend) -> list[str]:
        """:meth:`_own_copies` of every agent this store demoted, a page of markers at a
        time (three batched head reads a page: the markers, the durable streams, the
        cold copies); a copy that fails the check is passed over with a warning."""
        out: list[str] = []
        after = COLD_MARKER
        while True:
            page = await self.durable.list_agents(after=after, limit=PAGE)
            markers = [i.agent_id for i in page if is_marker(i.agent_id)]
            ids = [m[len(COLD_MARKER) :] for m in markers]
            if ids:
                bodies = await self.durable.read_heads(markers)
                streams = await self.durable.read_heads(ids)
                copies = await cold.read_heads(ids)
                for agent_id, mark, stream, copy in zip(ids, bodies, streams, copies, strict=True):
                    body = marker_body([mark]) if mark is not None else None
                    head = body.get("head") if body is not None else None
                    if body is None or not isinstance(head, int):
                        continue
                    if mark is not None and is_claim(body | {"_seq": mark.seq}):
                        continue  # (a claim: the durable stream, if any, is the agent)
                    if stream is not None and stream.seq >= head:
                        continue  # (the durable stream is the agent)
                    ours = head_is_demoted(copy, body)
                    if ours is None:  # a marker of an earlier version: the whole check
                        ours = bool(await self._own_copies(cold, [agent_id], strict=False))
                    elif not ours:
                        logger.warning(
                            "the cold tier's copy of agent %r is not the one this store"
                            " demoted (another store's sharing the cold tier?): passed over",
                            agent_id,
                        )
                    if ours:
                        out.append(agent_id)
            if len(page) < PAGE or not is_marker(page[-1].agent_id):
                return out
            after = page[-1].agent_id

    async def _own_copies(
        self, cold: Backend, agent_ids: Sequence[str], *, strict: bool
    ) -> list[str]:
        """Those of ``agent_ids`` whose cold copy is this store's demoted agent: a marker
        here, no whole stream beside it (a demotion that died before its last step: the
        durable stream is the agent), and the copy the marker says (not another store's
        sharing the cold tier: :func:`check_demoted_copy`). A copy that fails the check
        raises its :class:`~statekeeper.errors.IntegrityError` when ``strict``, else is
        passed over with a warning."""
        out = []
        for agent_id in agent_ids:
            entry = await self._marker_entry(agent_id)
            if entry is None or await self.durable.head(agent_id) >= entry[0].head_seq:
                continue
            if is_claim(entry[1]):
                continue
            try:
                await check_demoted_copy(cold, agent_id, entry[1], "nothing was expired")
            except IntegrityError as exc:
                if strict:
                    raise
                logger.warning("%s", exc)
                continue
            out.append(agent_id)
        return out

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Expire the records where they are: in the durable tier and (a demoted
        agent's) the cold one, an agent's under its lock (no demotion or rehydration
        moves them meanwhile); the hot tier's copies too where it can (a cache: its
        records answer no lookup). Nothing is brought back from the cold tier."""
        self._check_open()
        self.require(Capability.KEY_EXPIRY)
        before = check_expiry(agent_id, before)
        if not count_only:
            self._check_can_write()

        async def each() -> int:
            total = await self.durable.expire_keys(agent_id, before, count_only=count_only)
            cold = self.cold
            if cold is not None:  # only its own demoted agents' copies (a shared cold tier)
                if agent_id is None:
                    owns = await self._own_demoted_copies(cold)
                else:
                    owns = await self._own_copies(cold, [agent_id], strict=True)
                for own in owns:
                    total += await cold.expire_keys(own, before, count_only=count_only)
            hot = self.hot
            if not count_only and hot is not None and hot.supports(Capability.KEY_EXPIRY):
                with contextlib.suppress(StatekeeperError):  # (a cache: best effort)
                    await hot.expire_keys(agent_id, before)
            return total

        if agent_id is None:
            return await each()
        async with self._locks.hold(agent_id):
            return await each()

    async def drop_all(self) -> int | None:
        """``drop_all`` on the hot and durable tiers; in the cold tier, only the copies of
        this store's demoted agents (a cold tier may be shared with other stores: theirs
        are left), before the durable tier's markers that name them go."""
        self._check_open()
        self.require(Capability.DROP_ALL)
        self._check_writable()
        if self.hot is not None:
            await self.hot.drop_all()
        cold = self.cold
        if cold is not None:  # its own copies only: a cold tier may be shared
            for agent_id in await self._demoted_ids():
                entry = await self._marker_entry(agent_id)
                if entry is not None and await self._own_copy(cold, agent_id, entry):
                    await cold.delete_agent(agent_id)
        await self.durable.drop_all()
        self._dirty.clear()
        self._last_used.clear()
        self._settled.clear()
        return None
