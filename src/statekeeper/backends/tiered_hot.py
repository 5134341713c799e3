"""The hot tier of :class:`~statekeeper.backends.tiered.TieredBackend`: every call to
it bounded and failure-tolerant (a failure marks it down, the durable tier answers),
the per-read check of a hot copy against the durable head and head tag, the mirroring
of accepted appends, and the lazy fill of a copy on a read (see the rules in
:mod:`.tiered`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence, Set
from typing import TypeVar

from ..errors import ConfigurationError, ConflictError, IntegrityError, StoreClosed
from ..records import AppendRequest, AppendResult, RawEvent, RawSnapshot, RewriteRequest
from .base import Backend, Capability
from .tiered_base import PAGE, TieredPart
from .tiered_copy import append_copy, base_of, snapshots

__all__ = ["MISS", "PENDING", "UNTAGGED", "Miss", "TieredHot", "as_durable"]

logger = logging.getLogger("statekeeper.backends.tiered")

T = TypeVar("T")


class Miss:
    """The hot tier did not answer (down, failed, or the agent is dirty)."""


MISS = Miss()

#: the head tag a checked hot copy of an untagged stream carries (a fill writes its copy
#: under a pending tag, which a rewrite cannot turn back into none): read as none
UNTAGGED = b"statekeeper/untagged-hot-copy"

#: the start of a fill's pending head tag (:meth:`TieredHot._fill`)
PENDING = b"statekeeper/pending-hot-copy/"


def as_durable(hot: tuple[int, bytes | None]) -> tuple[int, bytes | None]:
    """A hot copy's head and tag as the durable tier's would read (``UNTAGGED``: none)."""
    return (hot[0], None) if hot[1] == UNTAGGED else hot


class TieredHot(TieredPart):
    """The hot-tier part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    def _hot_failed(self, exc: BaseException) -> None:
        self.stats["hot_failures"] += 1
        if time.monotonic() >= self._hot_down_until:
            logger.warning(
                "hot tier failed (%s: %s); using the durable tier for %.1fs",
                type(exc).__name__,
                exc,
                self.hot_retry_after,
            )
        self._hot_down_until = time.monotonic() + self.hot_retry_after

    async def _hot_call(
        self,
        fn: Callable[[Backend], Awaitable[T]],
        agents: Sequence[str],
        *,
        write: bool,
        budget: float | None = None,
    ) -> T | Miss:
        """Call the hot tier, or return ``MISS`` when it is down, dirty or failing.

        ``ConflictError`` from the hot tier propagates (callers decide what it means).
        A failed or skipped *write* leaves the agents dirty: their hot copies are
        deleted before the hot tier serves them again.
        """
        hot = self.hot
        if hot is None:
            return MISS
        if not self.hot_available():
            if write:
                self._dirty.update(agents)
            return MISS
        for agent_id in agents:
            if agent_id in self._dirty and not await self._clean(agent_id):
                return MISS
        try:
            async with asyncio.timeout(budget or self.hot_timeout):
                return await fn(hot)
        except ConflictError:
            raise
        except ConfigurationError as exc:  # (not a failure to wait out: see _check_hot)
            if write:
                self._dirty.update(agents)
            raise ConfigurationError(f"the tiered store's hot tier refused: {exc}") from exc
        except Exception as exc:
            if self._closed:
                raise StoreClosed("tiered backend closed during an operation") from exc
            if write:
                self._dirty.update(agents)
            self._hot_failed(exc)
            return MISS

    async def _check_hot(self, agent_id: str) -> None:
        """Before the first write (every write that touches the hot tier: an append,
        a snapshot, a delete, a rewrite, a compaction, a key rename, a demotion): the
        hot tier is asked once (a read of the agent's head), so that a hot tier
        refusing its configuration (a ``ConfigurationError``: e.g. a Redis prefix
        holding a store of record) fails the operation before the durable tier is
        written, rather than after it (the change made, reported failed) or being
        passed over as a down hot tier for ever (a warning each ``hot_retry_after``).
        A hot tier down now is asked again at the next write."""
        if self._hot_ready or not self.hot_available():
            return
        answer = await self._hot_call(lambda h: h.head(agent_id), [], write=False)
        self._hot_ready = not isinstance(answer, Miss)

    async def _clean(self, agent_id: str) -> bool:
        """Delete a possibly stale hot copy; True once the agent is clean."""
        assert self.hot is not None
        try:
            async with asyncio.timeout(self.hot_timeout):
                await self.hot.delete_agent(agent_id)
        except Exception as exc:
            self._hot_failed(exc)
            return False
        self._dirty.discard(agent_id)
        return True

    async def _drop_hot(self, agent_id: str) -> bool:
        """The hot copy disagrees with the durable tier: delete it (True), or mark it
        dirty (False: the hot tier down or failing — the copy may still be there)."""
        result = await self._hot_call(lambda h: h.delete_agent(agent_id), [agent_id], write=True)
        if isinstance(result, Miss):
            self._dirty.add(agent_id)
            return False
        return True

    async def _hot_checked(
        self, agent_id: str, fn: Callable[[Backend], Awaitable[T]]
    ) -> tuple[int, T] | None:
        """``(durable head, answer)`` when the hot tier may answer a read of the agent,
        else None (the caller asks the durable tier).

        The durable tier is the authority: a hot copy is trusted on no process's word
        (another process may have written while this one could not reach the hot
        tier, and died), only when its head and head tag equal the durable tier's,
        compared on every read. The durable head read, the hot head read and the hot
        read itself run concurrently: one round trip of latency, not three. The
        caller checks the answer against the durable head (a read must reach it), so
        an answer is never older than the durable head read during this call.
        """
        if self.hot is None or not self.hot_available():
            return None
        durable, hot, answer = await asyncio.gather(
            self.durable.head_tag(agent_id),
            self._hot_call(lambda h: h.head_tag(agent_id), [agent_id], write=False),
            self._hot_call(fn, [agent_id], write=False),
        )
        if durable[0] == 0 or isinstance(hot, Miss) or isinstance(answer, Miss):
            return None
        if as_durable(hot) == durable:
            return durable[0], answer
        if hot[0] > 0:  # stale, or moved/rewritten by someone else: refill it
            await self._drop_hot(agent_id)
        return None

    async def _check_hot_head(self, agent_id: str, durable_head: int) -> None:
        """After a durable conflict: a hot copy at another head is stale — drop it."""
        hot_head = await self._hot_call(lambda h: h.head(agent_id), [agent_id], write=False)
        if not isinstance(hot_head, Miss) and hot_head not in (0, durable_head):
            await self._drop_hot(agent_id)

    async def _hot_apply(
        self, requests: Sequence[AppendRequest], known: Set[int] = frozenset()
    ) -> None:
        """Mirror appends the durable tier accepted into the hot tier, best effort
        (``known``: the indexes of those whose ``expected_tag`` is their copy's tag,
        proven by the durable commit: :mod:`.tiered_proof`)."""
        if self.hot is None or not requests:
            return
        agents = sorted({r.agent_id for r in requests})
        # the durable tier checked the fences; the copy carries none
        plain = [dataclasses.replace(r, fence=None) if r.fence is not None else r for r in requests]
        stale: set[str] = set()
        results = await self._hot_call(
            lambda h: self._mirror(h, plain, stale, known), agents, write=True
        )
        if isinstance(results, Miss):
            return
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, ConflictError):
                if result.current_seq != 0:  # present but not at our base: stale
                    stale.add(request.agent_id)
            elif isinstance(result, BaseException) or result.duplicate:
                stale.add(request.agent_id)
        for agent_id in sorted(stale):
            await self._drop_hot(agent_id)

    async def _mirror(
        self,
        hot: Backend,
        requests: list[AppendRequest],
        stale: set[str],
        known: Set[int] = frozenset(),
    ) -> list[AppendResult | BaseException]:
        """The hot append of ``requests``, each compared with a head tag its copy is
        proven to carry by the durable commit: a tagged one's ``expected_tag``, the
        copy's tag one given before the durable append (``known``:
        :mod:`.tiered_proof`), or the head tag of the one before it of its agent here
        (it chains on that). One with ``check_tag`` and ``expected_tag`` None reads the
        copy's tag first (one hot call more, these appends alone): the stand-in
        ``UNTAGGED`` of a filled untagged stream counts as none, a copy under a fill's
        pending tag is not appended to (``stale``: dropped, the fill's promotion then
        refused). Any other (no ``check_tag``, not proven) is not mirrored: its agent's
        copy is dropped (``stale``). Was: the copy's tag read and compared — a copy of
        an earlier incarnation of the agent at the same head (deleted and written again
        past this hot tier) was appended to, given the durable head and tag, and served
        with its old events; and an unchecked append onto a pending copy made it the
        durable head and tag (the old bytes of a rewrite between the fill's read and
        its write, served)."""
        if not (hot.compares_head_tag and hot.supports(Capability.REWRITE)):
            return await hot.append_batch(requests)
        sent = list(requests)
        asked: list[int] = []
        before: dict[str, AppendRequest] = {}
        for i, r in enumerate(requests):
            prev, before[r.agent_id] = before.get(r.agent_id), r
            if i in known or r.expected_seq == 0:
                continue
            if r.check_tag:
                if prev is None and r.expected_tag is None:
                    asked.append(i)  # (a later one of its agent chains on the one before)
            elif prev is not None and r.expected_seq == prev.expected_seq + len(prev.events):
                sent[i] = dataclasses.replace(r, expected_tag=prev.head_tag, check_tag=True)
            else:
                stale.add(r.agent_id)  # (proven no way: dropped)
        tags = (
            await asyncio.gather(*(hot.head_tag(requests[i].agent_id) for i in asked))
            if asked
            else []
        )
        for i, (seq, tag) in zip(asked, tags, strict=True):
            request = requests[i]
            if seq == request.expected_seq and tag is not None and tag.startswith(PENDING):
                stale.add(request.agent_id)
            elif tag == UNTAGGED:  # (else None compared as sent)
                sent[i] = dataclasses.replace(request, expected_tag=tag)
        # (a stale copy's agent is left out: appended to, it would be served)
        kept = [i for i, r in enumerate(sent) if r.agent_id not in stale]
        made = await hot.append_batch([sent[i] for i in kept]) if kept else []
        results: list[AppendResult | BaseException] = [
            ConflictError(r.agent_id, r.expected_seq, r.expected_seq) for r in requests
        ]
        for i, result in zip(kept, made, strict=True):
            results[i] = result
        return results

    def _hit(self) -> None:
        self.stats["hot_hits"] += 1

    async def _fill(self, agent_id: str) -> None:
        """Copy the agent's stream and snapshots into the hot tier (lazily)."""
        hot = self.hot
        if hot is None or not self.hot_available() or agent_id in self._dirty:
            return
        async with self._locks.hold(agent_id):
            head, tag = await self.durable.head_tag(agent_id)
            if head == 0 or head > self.fill_limit:
                return
            current = await self._hot_call(lambda h: h.head_tag(agent_id), [agent_id], write=False)
            if isinstance(current, Miss) or as_durable(current) == (head, tag):
                return
            # the copy under a pending tag of its own, made the durable one only once
            # its check passed: one whose check failed (or was cancelled), its drop
            # failing too, is never served — every read's check compares head tags.
            # Was: written under the durable tag, such a copy (dirty in this process
            # alone) was served by every other store sharing the hot tier
            pending = (
                PENDING + secrets.token_bytes(16) if hot.supports(Capability.REWRITE) else None
            )
            try:
                result = await self._hot_call(
                    lambda h: self._copy_to_hot(h, agent_id, head, pending),
                    [agent_id],
                    write=True,
                    budget=self.hot_timeout * (2 + head / PAGE),
                )
            except ConflictError:
                result = MISS
            if isinstance(result, Miss):
                await self._drop_hot(agent_id)
                return
            # a writer in another process may have moved the head meanwhile, pruned the
            # stream (its head and tag kept: the base moved) or rewritten it (a rekey,
            # a migration: head, tag and base kept, the bytes new) after the copy's read
            # and before its write — that change's own drops then came before the copy.
            # Was: head, tag and base alone, a rewrite's old bytes kept and served
            try:
                same = await self._still_copied(agent_id, head, tag, result)
            except BaseException:  # (unchecked: dropped. Was: kept when the check
                await self._drop_hot(agent_id)  # failed or its read was cancelled)
                raise
            if not same:
                await self._drop_hot(agent_id)
                return
            if pending is not None and not await self._promote(agent_id, head, pending, tag):
                return
            self.stats["fills"] += 1

    async def _promote(self, agent_id: str, head: int, pending: bytes, tag: bytes | None) -> bool:
        """A fill's checked copy, written under ``pending``, given the durable head tag
        (``UNTAGGED`` for none): served from now on. False when it was not: a drop or
        another store's fill since (its copy not this one's to drop; never served under
        a pending tag), or the hot tier failing (dropped, else dirty)."""
        promote = RewriteRequest(agent_id, head, pending, head_tag=UNTAGGED if tag is None else tag)
        try:
            done = await self._hot_call(lambda h: h.rewrite(promote), [agent_id], write=True)
        except ConflictError:
            return False
        if isinstance(done, Miss):
            await self._drop_hot(agent_id)
            return False
        return True

    async def _still_copied(
        self,
        agent_id: str,
        head: int,
        tag: bytes | None,
        copied: tuple[list[RawEvent], list[RawSnapshot]],
    ) -> bool:
        """After a fill's copy is written: is the durable stream still what it copied?
        Its head and tag, its events read again (from its first: the base too; one
        call up to ``PAGE`` events, where the base alone was read before) and each
        snapshot it copied (one call each) — all at once. A change between the copy's
        read and its write that came after the changer's last drop of the hot copy is
        seen here (it committed before this read); one committed after this read
        dropped the copy after it. No read is added to a hit."""
        events, snaps = copied
        now = await asyncio.gather(
            self.durable.head_tag(agent_id),
            *(self.durable.latest_snapshot(agent_id, s.seq) for s in snaps),
        )
        if now[0] != (head, tag) or list(now[1:]) != snaps:
            return False
        seq, at = 0, 0
        while seq < head:
            page = await self.durable.read(agent_id, seq, head, limit=PAGE)
            if not page or page != events[at : at + len(page)]:
                return False
            at += len(page)
            seq = page[-1].seq
        return at == len(events)

    async def _copy_to_hot(
        self, hot: Backend, agent_id: str, head: int, pending: bytes | None = None
    ) -> tuple[list[RawEvent], list[RawSnapshot]]:
        """The copy made (its head under the tag ``pending``, when given, else the durable
        one); the events (from the stream's base) and snapshots it copied."""
        await hot.delete_agent(agent_id)
        tag_head, tag = await self.durable.head_tag(agent_id)
        if tag_head != head:
            raise ConflictError(agent_id, head, tag_head)  # moved meanwhile: try later
        base = await base_of(self.durable, agent_id)
        if base is not None and not hot.supports(Capability.BASE_IMPORT):
            raise ConflictError(agent_id, head, 0)  # a compacted stream stays out of it
        seq = 0 if base is None else base.seq
        copied: list[RawEvent] = []
        while seq < head:
            events = await self.durable.read(agent_id, seq, head, limit=PAGE)
            if not events:
                raise IntegrityError(agent_id, seq + 1, "stream ended while copying to hot")
            last = events[-1].seq == head
            await append_copy(
                hot,
                AppendRequest(
                    agent_id, seq, tuple(events), head_tag=(pending or tag) if last else None
                ),
                base,
                (),  # (the hot copy holds no idempotency keys: the durable tier's are asked)
            )
            copied += events
            seq = events[-1].seq
        snaps = await snapshots(self.durable, agent_id)
        for snap in snaps:
            await hot.save_snapshot(agent_id, snap)
        return copied, snaps
