"""The writes of :class:`~statekeeper.backends.tiered.TieredBackend`: each decided by the
durable tier under the agent's lock (a demoted agent brought back first), then mirrored
into (or dropped from) the hot tier; deletes reach the cold tier's own copy too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ..arguments import MAX_ID_BYTES
from ..errors import (
    BackendError,
    ConfigurationError,
    ConflictError,
    InvalidAgentId,
    StatekeeperError,
)
from ..records import AppendRequest, AppendResult, RawSnapshot, RewriteRequest, StreamChange
from .base import (
    Backend,
    Capability,
    KeptKeys,
    validate_from_base,
    validate_from_base_guard,
    validate_rename_guard,
    validate_request,
)
from .settle_row import settles_at_head, store_at_head
from .tiered_claims import COLD_MARKER
from .tiered_proof import TieredProof
from .tiered_refusals import ABSENT, DEMOTED, deleted_hot_copy_left, hot_copy_kept, hot_copy_left
from .tiered_rehydrate import TieredRehydrate
from .tiered_unfenced import copy_not_pruned, prune_copy

__all__ = ["TieredWrites"]

_T = TypeVar("_T")


class TieredWrites(TieredRehydrate, TieredProof):
    """The write part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    async def _drop_hot_first(self, agent_id: str, change: str, *, by_tag: bool = False) -> bool:
        """Before ``change`` of ``agent_id`` is written anywhere (under its lock): its hot
        copy dropped, else the change refused (:func:`~.tiered_refusals.hot_copy_kept`,
        nothing written).
        A hot copy is checked by head and head tag alone, which a prune or a rewrite
        keeps, and which a stream deleted and re-made to the same head without a tag
        has again: a copy whose drop failed AFTER the change was served as the agent by
        every other store sharing the hot tier (the pruned history, the old bytes, the
        deleted agent's data) — was: a delete dropped it last, its failure marked it
        dirty in this process alone and the delete returned done. Dropped first, a
        failure leaves the agent whole and a retry finishes; the reads stay as cheap as
        they were (no identity beyond head and tag to compare on each).

        ``by_tag`` (a delete): a stream whose head carries a tag is deleted even so (the
        tag commits to the whole chain: no re-made stream is taken for the copy) — True
        then, a copy left behind harmless; False otherwise (the copy dropped)."""
        if await self._drop_hot_now(agent_id):
            return False
        if by_tag:
            head, tag = await self.durable.head_tag(agent_id)
            if head > 0 and tag is not None:
                return True
        raise hot_copy_kept(agent_id, change)

    async def _drop_hot_first_for_delete(self, agent_id: str) -> bool:
        """A delete's :meth:`_drop_hot_first` (under the agent's lock), whose refusal
        says why a copy may be there when no stream of the agent is in the durable tier
        (:data:`ABSENT`, :data:`DEMOTED`). Such a delete writes nothing there, yet is
        not let through: a copy left by an earlier delete whose drop after it failed (a
        ``maybe_applied`` error told to that caller alone, maybe in another process) is
        not provably gone, and a delete answered done with it left lets an agent re-made
        to the same head without a tag be served it."""
        if await self._drop_hot_now(agent_id):
            return False
        head, tag = await self.durable.head_tag(agent_id)
        if head > 0 and tag is not None:
            return True  # (see _drop_hot_first: the tag commits to the whole chain)
        if head > 0:
            raise hot_copy_kept(agent_id, "the delete")
        if self.cold is not None and (await self._own_cold(self.cold, agent_id))[0]:
            raise hot_copy_kept(agent_id, "the delete", DEMOTED)
        raise hot_copy_kept(agent_id, "the delete", ABSENT)

    async def _drop_hot_now(self, agent_id: str) -> bool:
        """:meth:`_drop_hot` (True: no hot copy left, or no hot tier), tried even while
        the hot tier is marked down (once, bounded by ``hot_timeout``): a change waits
        on it (:meth:`_drop_hot_first`)."""
        if self.hot is None:
            return True
        if self.hot_available():
            return await self._drop_hot(agent_id)
        if await self._clean(agent_id):
            return True
        self._dirty.add(agent_id)
        return False

    async def _create_refused(self, request: AppendRequest) -> BackendError | None:
        """(Under the agent's lock.) Before a create without a head tag: a hot copy left
        of an agent of that id (a delete whose drop after it failed, told to its caller
        alone) matches the new stream at its head — dropped first, else the refusal
        (nothing written; None: go on). Was: the create made, the copy left dirty in this
        process alone, served by every other store sharing the hot tier once the new
        stream reached its head. A tagged create goes (a tag commits to the chain), as
        does one a durable stream makes a conflict anyway."""
        if request.expected_seq != 0 or request.head_tag is not None or self.hot is None:
            return None
        agent_id = request.agent_id
        if await self._drop_hot_now(agent_id) or await self.durable.head(agent_id):
            return None
        return hot_copy_kept(agent_id, "the create")

    async def _drop_hot_after(self, agent_id: str, tagged: bool) -> None:
        """After a delete (``tagged``: what :meth:`_drop_hot_first` returned): the hot
        copy dropped again — one another store filled between that drop and the
        delete — else :func:`~.tiered_refusals.deleted_hot_copy_left`
        (``maybe_applied``); a tagged stream's only as before (best effort: a copy left
        is never served)."""
        if self.hot is None:
            return
        if tagged:
            await self._drop_hot(agent_id)
        elif not await self._drop_hot_now(agent_id):
            raise deleted_hot_copy_left(agent_id)

    def _too_long(self, agent_id: str) -> InvalidAgentId | None:
        """The refusal of an id longer than :attr:`max_id_bytes` (a tier's keys cannot
        hold it), or None: checked before anything is written to any tier."""
        limit = self.max_id_bytes
        if limit >= MAX_ID_BYTES or len(agent_id) * 4 <= limit:
            return None
        size = len(agent_id.encode("utf-8", "surrogatepass"))
        if size <= limit:
            return None
        shown = repr(agent_id if len(agent_id) <= 40 else agent_id[:40] + "…")
        return InvalidAgentId(
            f"agent_id {shown} is {size:,} bytes in UTF-8, over the limit of {limit:,} of"
            " this tiered store (the longest id each of its tiers, and a demoted agent's"
            " marker, holds)"
        )

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        refused = self._too_long(request.agent_id)
        if refused is not None:
            raise refused
        agent_id = request.agent_id
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            kept = await self._create_refused(request)
            if kept is not None:
                raise kept
            if request.check_tag or request.expected_seq == 0:  # (a store's: its tag)
                result = await self._durable_append(request)
                if not result.duplicate:
                    await self._hot_apply([request])
                return result
            result, proofs = await self._append_proven(request)  # (:mod:`.tiered_proof`)
            await self._hot_apply_proven([request], [result], proofs)
        return result

    async def _durable_append(self, request: AppendRequest) -> AppendResult:
        agent_id = request.agent_id
        if request.expected_seq == 0 and self.cold is not None:
            await self._rehydrate(agent_id, locked=True)  # a demoted agent is not a new one
        elif self.cold is not None and agent_id not in self._settled:
            await self._first_use(agent_id, await self.durable.head(agent_id), locked=True)
        try:
            result = await self.durable.append(request)
        except ConflictError as exc:
            if (
                exc.current_seq == 0
                and self.cold is not None
                and await self._rehydrate(agent_id, locked=True)
            ) or await self._went_back(agent_id, exc.current_seq):
                result = await self.durable.append(request)
            else:
                await self._check_hot_head(agent_id, exc.current_seq)
                raise
        if agent_id in self._settled:
            self._settle_at(agent_id, result.last_seq)
        return result

    async def _went_back(self, agent_id: str, head: int) -> bool:
        """After a conflict at durable head ``head``: True when the agent was brought
        back from the cold tier now — its stream was below the head this process saw
        (another process demoted it since, and a third's rehydration is under way:
        the stream is that copy's part, which an append here was acknowledged on and
        deleted with the part, and read as the agent, stale)."""
        if self.cold is None or head >= self._settled.get(agent_id, 0):
            return False
        del self._settled[agent_id]
        return await self._first_use(agent_id, head, locked=True) != head

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        if not requests:
            return []
        refusals = {i: self._too_long(r.agent_id) for i, r in enumerate(requests)}
        if any(refusals.values()):  # (each refused on its own, the others made)
            rest = [r for i, r in enumerate(requests) if refusals[i] is None]
            made = iter(await self.append_batch(rest))
            return [refusals[i] or next(made) for i in range(len(requests))]
        agents = sorted({r.agent_id for r in requests})
        await self._check_hot(agents[0])
        for agent_id in agents:
            self._touch(agent_id)
        held: list[str] = []
        try:
            for agent_id in agents:  # sorted: two batches never wait on each other
                await self._locks.acquire(agent_id)
                held.append(agent_id)
            if self.cold is not None:  # a demoted agent is not a new one
                for agent_id in sorted({r.agent_id for r in requests if r.expected_seq == 0}):
                    await self._rehydrate(agent_id, locked=True)
                for agent_id in sorted({r.agent_id for r in requests} - self._settled.keys()):
                    await self._first_use(agent_id, await self.durable.head(agent_id), locked=True)
            sent, proofs = await self._proven(requests)  # (an unchecked append's copy)
            results = await self._batch_creates_checked(sent)
            if self.cold is not None:
                for i, (req, res) in enumerate(zip(sent, results, strict=True)):
                    if (
                        isinstance(res, ConflictError)
                        and res.current_seq == 0
                        and await self._rehydrate(req.agent_id, locked=True)
                    ):
                        try:
                            results[i] = await self.durable.append(req)
                        except Exception as exc:
                            results[i] = exc
            await self._refused_proofs(requests, sent, results, proofs)
            await self._hot_apply_proven(requests, results, proofs)
            for req, res in zip(requests, results, strict=True):
                if isinstance(res, ConflictError):
                    await self._check_hot_head(req.agent_id, res.current_seq)
        finally:
            for agent_id in held:
                self._locks.release(agent_id)
        return results

    async def _batch_creates_checked(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        """(Under the agents' locks.) The durable batch, each untagged create first
        checked by :meth:`_create_refused` (one refused alone, the others made)."""
        refused = [await self._create_refused(r) for r in requests]
        if not any(refused):
            return await self.durable.append_batch(requests)
        rest = [r for r, n in zip(requests, refused, strict=True) if n is None]
        made = iter(await self.durable.append_batch(rest) if rest else [])
        return [n or next(made) for n in refused]

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_can_write()
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            try:
                await self.durable.save_snapshot(agent_id, snapshot)
            except ConflictError as exc:
                if not (exc.current_seq == 0 and await self._rehydrate(agent_id, locked=True)):
                    raise
                await self.durable.save_snapshot(agent_id, snapshot)
            try:
                await self._hot_call(
                    lambda h: h.save_snapshot(agent_id, snapshot), [agent_id], write=True
                )
            except ConflictError as exc:
                if exc.current_seq != 0:
                    await self._drop_hot(agent_id)

    @property
    def replaces_snapshots(self) -> bool:  # type: ignore[override]
        """The durable tier checks a settle's commit at the head (:meth:`replace_snapshot`)."""
        return settles_at_head(self.durable)

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        """:meth:`Backend.replace_snapshot` decided by the durable tier's commit, checked
        at the head there (:func:`~.settle_row.store_at_head`; a demoted agent brought
        back first); then the hot copy: the same change at the same identity where the
        hot tier checks it so, else its row alone — a copy refusing it (another stream
        there, or behind: a conflict; a ``ConfigurationError``) is dropped, refilled on
        the next read, and the durable commit's answer returned."""
        self._check_can_write()
        if not self.replaces_snapshots:
            return await super().replace_snapshot(agent_id, snapshot, drop_seq, head, checksum)
        self._touch(agent_id)
        await self._check_hot(agent_id)

        async def stored(tier: Backend) -> bool:
            return await store_at_head(tier, agent_id, snapshot, drop_seq, head, checksum)

        async def mirror(hot: Backend) -> None:
            if settles_at_head(hot):
                await stored(hot)
            else:  # (a dropped row left in the copy: a snapshot of the same stream)
                await hot.save_snapshot(agent_id, snapshot)

        async with self._locks.hold(agent_id):
            try:
                removed = await stored(self.durable)
            except ConflictError as exc:
                if not (exc.current_seq == 0 and await self._rehydrate(agent_id, locked=True)):
                    raise
                removed = await stored(self.durable)

            try:
                await self._hot_call(mirror, [agent_id], write=True)
            except (ConflictError, ConfigurationError):
                # (a hot copy refusing the row, after the durable commit: the row stands
                # there, the truth — dropped, refilled on the next read. Was: the hot
                # tier's ConfigurationError raised out of a settle whose row stood, the
                # copy left as it was)
                await self._drop_hot(agent_id)
        return removed

    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent from every tier: its cold copy first (a demoted agent's, or
        what a demotion cut short left of this stream), then its marker, then the durable
        stream — a failure on the way leaves the agent whole, and deleting again
        finishes. The hot copy is dropped before all of them, and again after
        (:meth:`_drop_hot_first`). A cold copy that is not this store's (another
        store's sharing the cold tier: no marker here, or not the copy the marker says)
        is never touched."""
        self._check_can_write()
        self._last_used.pop(agent_id, None)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            tagged = await self._drop_hot_first_for_delete(agent_id)
            existed = False
            if self.cold is not None:
                existed, ours = await self._own_cold(self.cold, agent_id)
                if ours:
                    await self.cold.delete_agent(agent_id)
                if existed:
                    await self.durable.delete_agent(COLD_MARKER + agent_id)
            existed = await self.durable.delete_agent(agent_id) or existed
            await self._drop_hot_after(agent_id, tagged)
        return existed

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete ``agent_id`` only if its head is still ``head`` (and its head event's
        checksum ``checksum``, when given) (:meth:`Backend.delete_agent_at`):
        the durable tier's own conditional delete (one commit there), so an append that
        lands between the check and the delete — from this process or another sharing
        the durable tier — makes it a :class:`~statekeeper.errors.ConflictError` with
        nothing deleted. (The default compared the head, then deleted whatever was there:
        such an append was deleted with the agent, without an error.) A demoted agent is
        brought back first; the hot copy, and a cold copy of this store's own that a
        demotion cut short left (never another store's), go after the delete; the hot
        copy is dropped before the delete too (:meth:`_drop_hot_first`)."""
        self._check_can_write()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            marker, ours = False, False
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
                marker, ours = await self._own_cold(self.cold, agent_id)
            tagged = await self._drop_hot_first(agent_id, "the delete", by_tag=True)
            if marker and self._fenced():
                # a demotion's claim beside the stream: ended first (its last step then
                # deletes nothing). Was: left until after the stream's delete — a load
                # in between found the claim's marker alone, took the agent for demoted
                # and brought the claim's whole cold copy back (the deleted agent served,
                # and kept)
                await self._end_claim(agent_id)
                marker = False
            await self.durable.delete_agent_at(agent_id, head, checksum)
            self._last_used.pop(agent_id, None)
            if self.cold is not None and ours:
                try:
                    await self.cold.delete_agent(agent_id)
                except StatekeeperError as exc:
                    raise BackendError(
                        f"agent {agent_id!r} was deleted from the durable tier, but deleting"
                        f" what a demotion cut short left of it in the cold tier"
                        f" {self.cold!r} failed ({type(exc).__name__}: {exc}); that copy is"
                        " left there (not the agent: nothing reads it), and a demotion of a"
                        " new agent of that id is refused while it is",
                        maybe_applied=True,
                    ) from exc
            if marker:
                await self.durable.delete_agent(COLD_MARKER + agent_id)
            await self._drop_hot_after(agent_id, tagged)
        return True

    async def _change_kept(
        self,
        agent_id: str,
        checked: Callable[[StreamChange], Awaitable[_T]] | None,
        plain: Callable[[], Awaitable[_T]],
        *,
        drop_first: bool = True,
    ) -> _T:
        """A change of ``agent_id``'s stream that keeps its head record (a rewrite, a
        key rename, a prune), under the agent's lock: a demotion's claim fenced
        (:meth:`_fence_demotion`: its last step kept no change) and a demoted agent
        brought back first; then the change — ``checked(check)`` (its commit with the
        claim's check, where the durable tier can: None where it cannot) through
        :meth:`_change_checked` (its give-up, BackendError, nothing changed — never the
        change unchecked), else ``plain()`` and the claim fenced again (one made
        meanwhile); the result of either returned; the hot copy dropped before the
        change (:meth:`_drop_hot_first`: the change refused, nothing written, when it
        cannot be; not ``drop_first``: a key rename, which changes nothing a hot copy
        serves) and again after (one another store filled meanwhile: refilled from
        the new bytes on the next read). A change that raises leaves
        both as they were — but one that may have landed (``maybe_applied``): the hot
        copy dropped too (was: kept, its pruned history or old bytes served on). Still
        open: a change on a durable tier that cannot (a Redis cluster, S3) is not
        committed with the check — a demotion whose last step commits between the
        change and the second fence undoes it (but a prune: :mod:`.tiered_unfenced`)."""
        async with self._locks.hold(agent_id):
            if self.cold is not None:
                await self._fence_demotion(agent_id)  # (its last step kept no change)
                await self._rehydrate(agent_id, locked=True)
            if drop_first:
                await self._drop_hot_first(agent_id, "the change")
            try:
                if self.cold is not None and checked is not None:
                    done = await self._change_checked(agent_id, checked)
                else:
                    done = await plain()
                    if self.cold is not None:
                        await self._fence_demotion(agent_id)  # (a claim made meanwhile)
            except StatekeeperError as exc:
                if self.hot is not None and getattr(exc, "maybe_applied", False):
                    await self._drop_hot(agent_id)  # (the change may stand)
                raise
            if self.hot is not None and not await (
                self._drop_hot_now(agent_id) if drop_first else self._drop_hot(agent_id)
            ):
                raise hot_copy_left(agent_id)
        return done

    async def rewrite(self, request: RewriteRequest) -> None:
        """Rewrite in the durable tier (see :meth:`Backend.rewrite`); the hot copy is
        dropped and refilled from the new bytes on the next read."""
        self._check_can_write()
        await self._check_hot(request.agent_id)
        change = StreamChange(request.agent_id, rewrite=request)
        checked = self._together_with(change) if self._changes_with_claim_check() else None
        await self._change_kept(request.agent_id, checked, lambda: self.durable.rewrite(request))

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Rename in the durable tier (a demoted agent brought back first, as for a
        rewrite; committed with the check of its cold marker where the durable tier
        takes a ``guard``: :meth:`_change_checked`); the hot copy is dropped and
        refilled on the next read. A ``guard`` is refused (no ``guards_renames``: the
        agent may be demoted)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        self.require(Capability.KEY_RENAME)
        await self._check_hot(agent_id)

        async def checked(check: StreamChange) -> int:
            return await self.durable.rename_keys(agent_id, renames, guard=check)

        return await self._change_kept(
            agent_id,
            checked if self._renames_with_claim_check() else None,
            lambda: self.durable.rename_keys(agent_id, renames),
            drop_first=False,
        )

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Prune in the durable tier (see :meth:`Backend.prune`: its atomic step
        compares ``head`` and ``checksum``); the hot copy is dropped and refilled,
        compacted, on the next read."""
        self._check_can_write()
        self.require(Capability.PRUNE)
        if head is None and checksum is not None:  # (refused before any tier is touched)
            raise ConfigurationError("a prune's checksum is its head's identity: give head too")
        await self._check_hot(agent_id)
        change = StreamChange(
            agent_id,
            prune_to=base_seq,
            drop_snapshots=tuple(drop_snapshots),
            prune_head=head,
            prune_checksum=checksum,
        )

        async def plain() -> None:
            if head is None and checksum is None:  # (also an override without them)
                await self.durable.prune(agent_id, base_seq, drop_snapshots)
            else:
                await self.durable.prune(agent_id, base_seq, drop_snapshots, head, checksum)
            if self.cold is not None and not self._fenced():
                # a demotion under way may delete the stream on its head record alone:
                # its whole cold copy pruned too (tiered_unfenced); the prune committed:
                # a failure from here on says it may stand (its hot copy dropped)
                try:
                    marker = await self._marker(agent_id)
                    if marker is not None:
                        await prune_copy(
                            self.durable,
                            self.cold,
                            agent_id,
                            marker.head_seq,
                            base_seq,
                            drop_snapshots,
                        )
                except Exception as exc:
                    raise copy_not_pruned(agent_id, exc) from exc

        checked = self._together_with(change) if self._changes_with_claim_check() else None
        await self._change_kept(agent_id, checked, plain)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """Create the compacted stream in the durable tier (a demoted agent exists: a
        conflict, as anywhere); the hot copy is filled on the next read, one left there
        dropped first (the create refused, nothing written, when it cannot be and the
        request has no head tag: :meth:`_drop_hot_first`). A ``guard`` is refused
        (:attr:`guards_from_base` false: its stream may be demoted)."""
        self._check_can_write()
        self.require(Capability.BASE_IMPORT)
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        refused = self._too_long(request.agent_id)
        if refused is not None:
            raise refused
        agent_id = request.agent_id
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
            # a copy left of an agent of that id (a delete whose drop after it failed)
            # matches a new stream of its head without a tag: dropped first, else the
            # create refused (with a tag: a copy of the same tag is the same chain).
            # Was: dropped after, best effort — served meanwhile, and for good when
            # that drop failed (the agent dirty in this process alone)
            if (
                not await self._drop_hot_now(agent_id)
                and request.head_tag is None
                and not await self.durable.head(agent_id)  # (else its conflict, below)
            ):
                raise hot_copy_kept(agent_id, "the compacted create")
            if raise_floor:  # (an engine written before it takes no raise_floor)
                result = await self.durable.append_from_base(
                    request, base, kept_keys, raise_floor=True
                )
            else:
                result = await self.durable.append_from_base(request, base, kept_keys)
            if self.hot is not None:
                await self._drop_hot(agent_id)  # (a fill of an older stream meanwhile)
        return result
