"""Appends that compare no known head tag, proven onto the hot copy's incarnation
(:class:`TieredProof`, a part of :class:`~statekeeper.backends.tiered.TieredBackend`).

A hot copy is checked by its head seq and head tag alone. An append without
``check_tag`` (a raw caller, a restore's pieces, a store whose cached tag is not known)
says nothing of the stream it lands on: mirrored onto the copy on the copy's own word
(its tag read, then compared by the hot append), a copy of an EARLIER incarnation of
the agent — deleted and written again to the same seq past this hot tier: through the
durable tier alone, or a tiered store whose hot tier failed during a tagged stream's
delete — was given the durable head and the append's tag, and served with its old
events by every store sharing the hot tier. So the copy's tag is read BEFORE the durable
append and the durable commit compares it (the request given ``check_tag`` with that
tag, the durable form of ``UNTAGGED``: none): committed, the copy is proven the same
incarnation and mirrored onto (the hot append compares the same tag); refused with the
head still at the request's base, the copy is another incarnation's — dropped, and the
append made as asked. An append proven no way (its copy at another seq, the hot tier
down, a durable tier comparing no tags: there the durable head and tag read beside the
copy's, the commit not comparing them) is not mirrored: the copy dropped
(:meth:`~.tiered_hot.TieredHot._mirror`).

The cost: the hot read of the tag an unchecked mirror made anyway, moved before the
durable commit (two hot round trips, as before); one durable append more only when the
copy is proven stale. A tagged append and a hot hit are untouched.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from ..errors import ConflictError
from ..records import AppendRequest, AppendResult
from .base import Backend, Capability
from .tiered_hot import PENDING, Miss, TieredHot, as_durable

__all__ = ["Proofs", "TieredProof"]

#: an append's index -> the head tag its hot copy is proven to carry at its base
Proofs = dict[int, bytes | None]


class TieredProof(TieredHot):
    """Unchecked appends proven onto their hot copies (see the module)."""

    #: the durable append with the cold tier's bookkeeping (:class:`.TieredWrites`)
    _durable_append: Callable[[AppendRequest], Awaitable[AppendResult]]

    async def _proven(
        self, requests: Sequence[AppendRequest]
    ) -> tuple[list[AppendRequest], Proofs]:
        """(Under the agents' locks, before the durable append.) The requests to send
        the durable tier — the first of each agent without ``check_tag`` (its appends
        here a chain) given the tag of its hot copy at its base, where the durable tier
        compares tags — and the proofs: each such request's index and its copy's tag."""
        sent, proofs = list(requests), Proofs()
        hot = self.hot
        if (
            hot is None
            or not (hot.compares_head_tag and hot.supports(Capability.REWRITE))
            or not self.hot_available()
        ):
            return sent, proofs
        first: dict[str, int] = {}
        last: dict[str, AppendRequest] = {}
        forked: set[str] = set()
        for i, r in enumerate(requests):
            first.setdefault(r.agent_id, i)
            prev, last[r.agent_id] = last.get(r.agent_id), r
            if prev is not None and r.expected_seq != prev.expected_seq + len(prev.events):
                # (not a chain: two at one seq, the first wins, as asked — proven, the
                # first refused by the copy's tag would let the second land first and be
                # acknowledged, the first made again only then: refused)
                forked.add(r.agent_id)
        asked = [
            i
            for i in first.values()
            if requests[i].expected_seq > 0 and requests[i].agent_id not in forked
        ]
        asked = [i for i in asked if not requests[i].check_tag]
        if not asked:
            return sent, proofs
        agents = [requests[i].agent_id for i in asked]
        durable = self.durable
        compares = durable.compares_head_tag

        async def read(hot: Backend) -> list[tuple[int, bytes | None]]:
            if len(agents) == 1:  # (no task: the common case, one append)
                return [await hot.head_tag(agents[0])]
            return list(await asyncio.gather(*(hot.head_tag(a) for a in agents)))

        async def tags() -> list[tuple[int, bytes | None]] | Miss:
            return await self._hot_call(read, agents, write=False)

        if compares:
            copies, heads = await tags(), None
        else:  # (read beside the copy's: not compared by the commit)
            copies, heads = await asyncio.gather(
                tags(), asyncio.gather(*(durable.head_tag(a) for a in agents))
            )
        if isinstance(copies, Miss):
            return sent, proofs
        for n, i in enumerate(asked):
            request, (seq, tag) = requests[i], copies[n]
            if seq != request.expected_seq or (tag is not None and tag.startswith(PENDING)):
                continue  # (no copy, another head, a fill's: not appended to)
            if compares:
                expected = as_durable((seq, tag))[1]
                sent[i] = dataclasses.replace(request, expected_tag=expected, check_tag=True)
            elif heads is None or heads[n] != as_durable((seq, tag)):
                continue
            proofs[i] = tag
        return sent, proofs

    async def _refused_proofs(
        self,
        requests: Sequence[AppendRequest],
        sent: Sequence[AppendRequest],
        results: list[AppendResult | BaseException],
        proofs: Proofs,
    ) -> None:
        """After the durable batch of ``sent``: each request given a copy's tag that the
        durable tier refused at its base (the copy another incarnation's) — its agent's
        copy dropped, its proof gone, and that agent's refused requests made again as
        asked (in ``results``)."""
        stale = {
            requests[i].agent_id
            for i in proofs
            if sent[i] is not requests[i]
            and isinstance(results[i], ConflictError)
            and results[i].current_seq == requests[i].expected_seq  # type: ignore[union-attr]
        }
        if not stale:
            return
        for agent_id in sorted(stale):
            await self._drop_hot(agent_id)
        for i in [i for i in proofs if requests[i].agent_id in stale]:
            del proofs[i]
        again = [
            i
            for i, r in enumerate(requests)
            if r.agent_id in stale and isinstance(results[i], ConflictError)
        ]
        made = await self.durable.append_batch([requests[i] for i in again])
        for i, result in zip(again, made, strict=True):
            results[i] = result

    async def _append_proven(self, request: AppendRequest) -> tuple[AppendResult, Proofs | None]:
        """(Under the agent's lock.) :meth:`_durable_append` of ``request`` with its
        proof (:meth:`_proven`); None for the proofs: the copy was proven stale
        (dropped: nothing to mirror)."""
        sent, proofs = await self._proven([request])
        try:
            return await self._durable_append(sent[0]), proofs
        except ConflictError as exc:
            if sent[0] is request or exc.current_seq != request.expected_seq:
                raise
        await self._drop_hot(request.agent_id)  # (another incarnation's copy)
        return await self._durable_append(request), None

    async def _hot_apply_proven(
        self,
        requests: Sequence[AppendRequest],
        results: Sequence[AppendResult | BaseException],
        proofs: Proofs | None,
    ) -> None:
        """:meth:`_hot_apply` of the ``requests`` the durable tier accepted, each proven
        one (``proofs``, by index) compared with its copy's tag; none when the copy was
        proven stale (``proofs`` None: dropped)."""
        if proofs is None:
            return
        accepted: list[AppendRequest] = []
        known: set[int] = set()
        for i, (request, result) in enumerate(zip(requests, results, strict=True)):
            if isinstance(result, AppendResult) and not result.duplicate:
                if i in proofs:
                    known.add(len(accepted))
                    request = dataclasses.replace(request, expected_tag=proofs[i], check_tag=True)
                accepted.append(request)
        await self._hot_apply(accepted, known)
