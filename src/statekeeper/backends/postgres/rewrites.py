"""The PostgreSQL backend's rewrites: replacing stored record bytes under a
compare-and-set head (key rotation, schema migrations). A mixin of
:class:`~.backend.PostgresBackend` (see its docstring for the guarantees).

* :meth:`Rewrites.rewrite`: one agent, one transaction, its head row locked
  ``FOR UPDATE``.
* :meth:`Rewrites.rewrite_many`: a page of agents in ONE transaction of two statements
  sent together (a pipeline: one round trip). ``rw_many_lock`` locks the page's head
  rows (in agent order, so two pages never deadlock); ``rw_many`` then checks and
  writes, its snapshot taken after the locks: a prune of one of the agents committed
  while the page waited for its lock is seen by the check of the pruned base (one
  statement locking and checking read the base from before the wait, and answered
  such a request applied). Each request is still atomic on its own: only those whose
  head is still the expected one have their events, snapshots and head tags written;
  the others are answered False and left untouched. A schema migration's page of
  1,000 agents is one round trip instead of 1,000 transactions of four statements
  (measured in docs/benchmarks.md, issue 14).

A request naming an event not stored (below the stream's pruned base) raises
:func:`~..base.unstored_rewrite`'s ConfigurationError, one carrying a snapshot below the
base (:mod:`..pruned_snapshots`) its own, nothing of it written; ``rw_many`` then applies
none of its page (distinct agents: one commit, as SQLite's), which a schema migration's
page takes the error for — was: the others committed, their audit entries voided as
not applied and their cached states kept.

Under row-level security (:mod:`.row_security`) the head row of an agent the role may
not write is filtered out of ``FOR UPDATE``, not refused: a rewrite of it found "no
stream", a page answered it "moved". Both ask the policy then (:func:`.deletes.refusal`)
and raise :class:`~statekeeper.errors.AccessDenied`; on a schema with row-level security
a page runs in a transaction, so a refused page writes none of its agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ...records import RewriteRequest
from ..base import unstored_rewrite, validate_rewrite
from ..pruned_snapshots import lowest_pruned_snapshot, pruned_snapshot_rewrite
from .deletes import refusal, row_security_binds
from .part import PostgresPart

__all__ = ["Rewrites"]


class Rewrites(PostgresPart):
    """Rewrites of :class:`~.backend.PostgresBackend`."""

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace stored record bytes in one transaction, if the head row (locked
        ``FOR UPDATE``) is still ``(expected_seq, expected_tag)``."""
        self._check_can_write()
        validate_rewrite(request)
        attempts = 0

        async def op() -> None:
            nonlocal attempts
            attempts += 1
            async with self._connection() as conn, conn.transaction():
                await self._rewrite_in(conn, request, attempts > 1)

        try:
            await self._retrying("rewrite", op)
        finally:
            self._wrote()

    async def _rewrite_in(self, conn: Any, request: RewriteRequest, retry: bool = False) -> None:
        """``request`` in ``conn``'s transaction, its head row locked ``FOR UPDATE``;
        ConflictError (the transaction rolls back) when the head is not the expected
        one, ConfigurationError when an event it names is not stored (pruned).
        ``retry``: after a lost commit, a head that already carries the request's
        new tag is the request applied (nothing more to write)."""
        agent_id = request.agent_id
        cur = await conn.execute(self._sql["rw_lock"], (agent_id,))
        row = await cur.fetchone()
        if row is None and (refused := await refusal(self, conn, agent_id, "rewrite")) is not None:
            raise refused  # the head row filtered away by row-level security: not absent
        head = int(row[0]) if row is not None else 0
        tag = bytes(row[1]) if row is not None and row[1] is not None else None
        if row is None or head != request.expected_seq or tag != request.expected_tag:
            # a retry after a lost commit finds its own new tag: done already
            if (
                retry
                and head == request.expected_seq
                and request.head_tag is not None
                and tag == request.head_tag
            ):
                return
            raise ConflictError(agent_id, request.expected_seq, head)
        if request.events:
            events = request.events
            cur = await conn.execute(
                self._sql["rw_events"],
                (
                    [e.seq for e in events],
                    [e.payload for e in events],
                    [e.checksum for e in events],
                    agent_id,
                ),
            )
            if cur.rowcount != len(events):  # an event not stored: the transaction rolls back
                # (the events run gap-free up to the head: the lowest seq named is missing)
                base = await _base(self, conn, agent_id, head)
                raise unstored_rewrite(agent_id, min(e.seq for e in events), base)
        if any(snap.seq < head for snap in request.snapshots):  # (the base is below the head)
            base = await _base(self, conn, agent_id, head)
            if (low := lowest_pruned_snapshot(request, base)) is not None:
                raise pruned_snapshot_rewrite(agent_id, low, base)  # (rolls back)
        for snap in request.snapshots:
            params = (agent_id, snap.seq, snap.timestamp, snap.payload, snap.checksum)
            await conn.execute(self._sql["rw_snap"], params)
        if request.head_tag is not None:
            await conn.execute(self._sql["rw_tag"], (request.head_tag, agent_id))

    rewrites_many = True

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        """:meth:`Backend.rewrite_many` in one ``rw_many`` statement. A retry after a
        lost connection counts a request whose head already carries its new tag as
        applied (its commit landed), as :meth:`rewrite` does."""
        self._check_can_write()
        for request in requests:
            validate_rewrite(request)
        if not requests:
            return []
        if len({r.agent_id for r in requests}) != len(requests):
            # one agent twice: its requests apply in turn (the second sees the first)
            return await super().rewrite_many(requests)
        params = _many_params(requests)
        attempts = 0

        async def op() -> set[int]:
            nonlocal attempts
            attempts += 1
            query, args = self._sql["rw_many"], {**params, "retry": attempts > 1}
            lock, agents = self._sql["rw_many_lock"], {"agents": params["agents"]}
            async with self._connection() as conn:
                if not self.audit_links:  # no row-level security: one round trip
                    async with conn.pipeline(), conn.transaction():
                        await conn.execute(lock, agents)
                        cur = await conn.execute(query, args)
                    return {int(row[0]) for row in await cur.fetchall()}
                async with conn.transaction():  # refused by row-level security: rolled back
                    await conn.execute(lock, agents)
                    cur = await conn.execute(query, args)
                    done = {int(row[0]) for row in await cur.fetchall()}
                    if len(done) < len(requests):
                        await _refused(self, conn, requests, done)
                    return done

        try:
            applied = await self._retrying("rewrite_many", op)
        finally:
            self._wrote()
        await self._retrying("rewrite_many", lambda: _check_unstored(self, requests, applied))
        return [i in applied for i in range(1, len(requests) + 1)]


async def _check_unstored(
    backend: PostgresPart, requests: Sequence[RewriteRequest], applied: set[int]
) -> None:
    """Raise :func:`~..base.unstored_rewrite` for the first request of a page that
    ``rw_many`` did not apply because it names an event not stored (pruned) while its
    head is the expected one: nothing of it was written, but it is not a moved head
    (False would tell a migration to read the agent again, and it would fail the same
    way)."""
    named = [r for i, r in enumerate(requests, 1) if i not in applied and (r.events or r.snapshots)]
    if not named:
        return
    async with backend._connection() as conn:
        for request in named:
            cur = await conn.execute(backend._sql["head_tag"], (request.agent_id,))
            row = await cur.fetchone()
            if row is None or int(row[0]) != request.expected_seq:
                continue
            tag = bytes(row[1]) if row[1] is not None else None
            if tag != request.expected_tag:
                continue
            base = await _base(backend, conn, request.agent_id, request.expected_seq)
            low = min((e.seq for e in request.events), default=base + 1)
            if low <= base:
                raise unstored_rewrite(request.agent_id, low, base)
            if (snap := lowest_pruned_snapshot(request, base)) is not None:
                raise pruned_snapshot_rewrite(request.agent_id, snap, base)


async def _base(backend: PostgresPart, conn: Any, agent_id: str, head: int) -> int:
    """The seq before ``agent_id``'s first stored event (``head``: none stored, all
    pruned), read in ``conn``'s transaction."""
    cur = await conn.execute(backend._sql["prune_base"], (agent_id,))
    row = await cur.fetchone()
    return head if row is None or row[0] is None else int(row[0]) - 1


async def _refused(
    backend: PostgresPart, conn: Any, requests: Sequence[RewriteRequest], done: set[int]
) -> None:
    """Raise the AccessDenied of the first request of a page ``rw_many`` did not apply
    because row-level security filtered its head row away (the role may not write the
    agent's namespace): a page is one commit, so none of it is written."""
    if not await row_security_binds(backend, conn):
        return
    for i, request in enumerate(requests, 1):
        if i not in done:
            refused = await refusal(backend, conn, request.agent_id, "rewrite")
            if refused is not None:
                raise refused


def _many_params(requests: Sequence[RewriteRequest]) -> dict[str, Any]:
    """The column arrays of ``rw_many``: one row per request, one per replaced event
    and one per replaced snapshot (each naming its request by 1-based position)."""
    ev_idx: list[int] = []
    ev_seq: list[int] = []
    ev_payload: list[bytes] = []
    ev_checksum: list[bytes] = []
    sn_idx: list[int] = []
    sn_seq: list[int] = []
    sn_ts: list[float] = []
    sn_payload: list[bytes] = []
    sn_checksum: list[bytes] = []
    for i, request in enumerate(requests, 1):
        for e in request.events:
            ev_idx.append(i)
            ev_seq.append(e.seq)
            ev_payload.append(e.payload)
            ev_checksum.append(e.checksum)
        # one statement upserts a row once: of two snapshots at one seq, the last wins
        for snap in {s.seq: s for s in request.snapshots}.values():
            sn_idx.append(i)
            sn_seq.append(snap.seq)
            sn_ts.append(snap.timestamp)
            sn_payload.append(snap.payload)
            sn_checksum.append(snap.checksum)
    return {
        "agents": [r.agent_id for r in requests],
        "seqs": [r.expected_seq for r in requests],
        "tags": [r.expected_tag for r in requests],
        "new_tags": [r.head_tag for r in requests],
        "ev_idx": ev_idx,
        "ev_seq": ev_seq,
        "ev_payload": ev_payload,
        "ev_checksum": ev_checksum,
        "sn_idx": sn_idx,
        "sn_seq": sn_seq,
        "sn_ts": sn_ts,
        "sn_payload": sn_payload,
        "sn_checksum": sn_checksum,
    }
