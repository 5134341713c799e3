"""Part of the backend contract, the rewrites (key rotation, migrations), prune, snapshot
replacement and compacted imports: the abstract methods and defaults
:class:`~statekeeper.backends.base.Backend` takes from :class:`RewritesContract`."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...arguments import check_stored_id
from ...errors import (
    BackendError,
    BackendUnavailable,
    CapabilityUnsupported,
    ConflictError,
)
from ...records import (
    AppendRequest,
    AppendResult,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from .capabilities import Capability
from .requests import KeptKeys, validate_rewrite

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class RewritesContract(ContractPart):
    async def rewrite(self, request: RewriteRequest) -> None:
        """Atomically replace the bytes of existing records (see :class:`RewriteRequest`):
        only if the head is still ``(expected_seq, expected_tag)``, else
        :class:`~statekeeper.errors.ConflictError` and nothing is written. An event
        not stored (pruned) raises :func:`unstored_rewrite`'s ConfigurationError, a
        snapshot below the stream's base :mod:`.pruned_snapshots`' (the one AT the base,
        which a prune keeps, rewrites), nothing written.

        Used by key rotation (``statekeeper rekey``). Capability ``REWRITE``; the
        default refuses.
        """
        raise CapabilityUnsupported(self.name, Capability.REWRITE.value)

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        """:meth:`rewrite` of many agents (a page of a schema migration): for each
        request, in order, True when it was applied and False when its head was not the
        expected one (nothing of it written). Each request is atomic on its own; an
        engine that sets :attr:`rewrites_many` commits them together (SQLite: one
        transaction). A malformed request (:func:`validate_rewrite`) is refused before
        any of them is written. A request naming an event not stored (pruned) or a
        snapshot below the base raises as :meth:`rewrite` does, nothing of it written (an
        engine that sets :attr:`rewrites_many` writes none of a page of distinct agents;
        the default applies them in turn: the requests before it may be). A
        :class:`~statekeeper.errors.BackendError` of the default once a request before
        it was applied says ``maybe_applied`` (was: its own request's word, often
        nothing written: a page part-made counted as not made); a
        :class:`~statekeeper.errors.BackendUnavailable` then is told as one, naming the
        request; a :class:`~statekeeper.errors.ConflictError` that says ``maybe_applied``
        (S3's, part-way through a rewrite: some of its records written) is raised as a
        ``BackendError(maybe_applied=True)``, never counted False."""
        for request in requests:
            validate_rewrite(request)
        done: list[bool] = []
        for request in requests:
            try:
                await self.rewrite(request)
            except ConflictError as exc:
                if getattr(exc, "maybe_applied", False):  # (part-made: S3's, see there)
                    raise BackendError(
                        f"rewrite_many: request {len(done) + 1} of {len(requests)} (agent"
                        f" {request.agent_id!r}) conflicted part-way, after some of its"
                        f" writes landed: {exc}",
                        maybe_applied=True,
                    ) from exc
                done.append(False)
            except BackendError as exc:
                if any(done):
                    exc.maybe_applied = True  # (the requests before it stand)
                raise
            except BackendUnavailable as exc:
                if not any(done):
                    raise
                # (a refusal of this request alone: S3's AccessDenied at its first write,
                # a policy on its keys. Was: BackendUnavailable, no maybe_applied — the
                # requests before it standing, the page counted as not made)
                raise BackendError(
                    f"rewrite_many: request {len(done) + 1} of {len(requests)} (agent"
                    f" {request.agent_id!r}) refused after {sum(done)} before it were"
                    f" applied (they stand): {exc}",
                    maybe_applied=True,
                ) from exc
            else:
                done.append(True)
        return done

    # -- optional capabilities (see Capability); the defaults refuse -----------------

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history, atomically: with ``base_seq > 0``, every event with seq
        ``<= base_seq`` and every snapshot below ``base_seq`` (the snapshot at
        ``base_seq`` becomes the stream's base); and the snapshots at the seqs of
        ``drop_snapshots``. The head,
        its tag, the events after ``base_seq`` and every idempotency record (also of
        the events removed: a retry still finds its append) are untouched.

        Refused with :class:`~statekeeper.errors.ConfigurationError`, nothing removed,
        unless ``0 <= base_seq < head`` and (for ``base_seq > 0``) a snapshot is stored at
        ``base_seq``, which ``drop_snapshots`` may not name; nor may it name the stream's
        current base (the seq before its first stored event, after an earlier prune) when
        this prune keeps it (``base_seq`` at or below it, 0 included): its events are
        gone, the snapshot is the only record of the state there. That is checked in the
        engine's atomic step — another process may have compacted the stream since the
        caller looked — and the error names the agent and the seq. Capability ``PRUNE``
        (retention); the default refuses.

        With ``head`` (the stream's head as the caller planned the prune on it) and
        ``checksum`` (that head event's stored checksum: the head record's identity, as
        :meth:`delete_agent_at` takes it), checked in the same atomic step:
        :class:`~statekeeper.errors.ConflictError`, nothing removed, when the head is
        another (``current_seq``: the stored one) or its event another record (a stream
        deleted and written again up to the same seq by another process since the plan:
        ``current_seq == head``) — its history is never cut by a plan made on the
        stream before it. An engine's override written before these arguments is
        refused by the store (:func:`~statekeeper.store.conditional.prune_at`) with
        :class:`~statekeeper.errors.CapabilityUnsupported` naming it.
        """
        raise CapabilityUnsupported(self.name, Capability.PRUNE.value)

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        """Store ``snapshot`` (at ``head``, the stream's head) and remove the snapshot at
        ``drop_seq`` (None: none) in one commit — a settle (:mod:`statekeeper.store.settle`).
        Only while the head is ``head`` and its event's stored checksum ``checksum``
        (given): else :class:`~statekeeper.errors.ConflictError`, nothing written. The
        removal is left out, the snapshot still stored, when ``drop_seq`` is the
        stream's base (compacted to it meanwhile) or the engine's prune refuses it:
        True when it was removed. Offered by an engine that overrides it and sets
        :attr:`replaces_snapshots` (SQLite, Redis, tiered over such a durable tier); the
        default refuses with :class:`~statekeeper.errors.CapabilityUnsupported`, nothing
        written (a settle on such an engine commits one ``append_together`` change
        checked at the head, or is refused: :mod:`statekeeper.backends.settle_row`).
        Was: two commits here, never called by the store — the snapshot stored with
        no head check (a head moved since: no ConflictError, the row written), and a
        prune override older than its head arguments raised a raw TypeError."""
        check_stored_id(agent_id)  # (a bad id is InvalidAgentId first, as on every engine)
        raise CapabilityUnsupported(
            self.name, "replace_snapshot", "a snapshot stored and one removed in one commit"
        )

    async def stream_bases(self, agent_ids: Sequence[str]) -> list[int]:
        """Each agent's base: the seq before its first stored event (0 for a whole
        stream, or no agent; more after :meth:`prune`). An incremental backup reads
        it for every agent to tell a compaction since its parent. The default reads
        one event per agent; SQLite answers a page of agents in one statement."""

        async def one(agent_id: str) -> int:
            first = await self.read(agent_id, 0, None, limit=1)
            return first[0].seq - 1 if first else 0

        return list(await asyncio.gather(*(one(a) for a in agent_ids)))

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """Create ``request.agent_id`` as a stream compacted at ``base.seq`` — what
        :meth:`prune` leaves: the snapshot ``base`` is its base, no event at or below it
        — with ``request.events`` (seqs ``base.seq + 1`` onward; ``expected_seq`` is
        ``base.seq``) after it, in ONE atomic write (idempotency key, head tag and a
        later snapshot as :meth:`append`), with ``kept_keys`` — ``(key, first_seq,
        last_seq)``: the idempotency records :meth:`prune` keeps of the appends it
        removed, each range at or below ``base.seq``, and at most one of an append it
        cut in two (``first_seq <= base.seq < last_seq``, its events after the base the
        first of ``request.events``, which then carries no key of its own) — in the
        same write, stored as given. A restore of a backup of a retained stream writes
        it so.

        ``raise_floor`` (an engine with a change feed): the feed's floor is raised
        through the position of the first event written (in the agent's shard), in
        the SAME atomic write — the stream enters the feed without its history, so a
        subscriber behind it must get :class:`~statekeeper.errors.FeedPositionCompacted`
        (rebuild from the states), never its kept events folded onto nothing. Raised
        after the write instead (a second step), a subscriber that read the feed in
        between delivered them and moved past the floor, silently
        (:func:`~statekeeper.store.feed_retention.from_base_floored`).
        ``guard`` (an engine with :attr:`guards_from_base`; see
        :func:`validate_from_base_guard`): a check of another stream, its head still
        ``guard.rewrite``'s ``(expected_seq, expected_tag)``, made in the same atomic
        write (its ``head_tag``, if any, stored there too), else
        :class:`~statekeeper.errors.ConflictError` naming that stream and nothing
        written.

        :class:`~statekeeper.errors.ConflictError` (nothing written) when the agent
        exists. Capability ``BASE_IMPORT``; the default refuses.
        """
        raise CapabilityUnsupported(self.name, Capability.BASE_IMPORT.value)
