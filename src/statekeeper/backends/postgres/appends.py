"""The PostgreSQL backend's append path: compare-and-append in one statement
(``sk_append`` / ``sk_append1``), group commit (``sk_append_batch``), and settling an
append whose outcome a lost connection left unknown. A mixin of
:class:`~.backend.PostgresBackend` (see its docstring for the guarantees)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from ...errors import (
    AccessDenied,
    BackendError,
    BackendRejected,
    ConfigurationError,
    ConflictError,
    LeaseHeld,
    LeaseLost,
)
from ...records import (
    AppendRequest,
    AppendResult,
    LeaseChange,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    StreamChange,
)
from ..base import (
    KeptKeys,
    append_outcome,
    check_prune,
    check_prune_at,
    lease_lost,
    validate_batch,
    validate_from_base,
    validate_from_base_guard,
    validate_request,
    validate_together,
)
from .absence import refused_check
from .alone import changes_alone, txid
from .arrays import batch_params
from .connection import kept_cursor, transient
from .deletes import refusal
from .feed import floor_over
from .limits import oversize, snapshot_oversize, together_oversize
from .part import PostgresPart
from .refusals import INSUFFICIENT_PRIVILEGE, filtered_at_head, together_what
from .rolled_back import ROLLED_BACK, RolledBack, Undo, run_again
from .together_locks import lock_together

__all__ = ["Appends"]


class Appends(PostgresPart):
    """Appends of :class:`~.backend.PostgresBackend`."""

    def _statement(self, request: AppendRequest) -> tuple[bytes, tuple[Any, ...]]:
        """The ``sk_append`` (or, for one event, ``sk_append1``) call for ``request``."""
        events = request.events
        snap = request.snapshot
        fence = request.fence
        tail = (
            request.idempotency_key,
            snap.seq if snap is not None else None,
            snap.timestamp if snap is not None else None,
            snap.payload if snap is not None else None,
            snap.checksum if snap is not None else None,
            request.head_tag,
            request.check_tag,
            request.expected_tag,
            fence[0] if fence is not None else None,
            fence[1] if fence is not None else None,
        )
        if len(events) == 1:
            e = events[0]
            one = (request.agent_id, request.expected_seq, e.seq, e.type, e.timestamp)
            return self._sql["append1"], (*one, e.payload, e.checksum, *tail)
        return self._sql["append"], (
            request.agent_id,
            request.expected_seq,
            [e.seq for e in events],
            [e.type for e in events],
            [e.timestamp for e in events],
            [e.payload for e in events],
            [e.checksum for e in events],
            *tail,
        )

    @staticmethod
    def _result(request: AppendRequest, row: tuple[Any, ...]) -> AppendResult:
        return append_outcome(request, row)

    async def _append_once(self, request: AppendRequest) -> tuple[Any, ...]:
        query, params = self._statement(request)
        async with self._connection() as conn:
            cur = kept_cursor(conn, query)
            await cur.execute(query, params)
            row: tuple[Any, ...] | None = await cur.fetchone()
        assert row is not None
        return row

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        if (refused := oversize((request,))) is not None:  # (over 1 GB: .limits)
            raise refused
        try:
            if not self._opened:
                await self._ensure_open()
            row = await self._append_once(request)
        except psycopg.Error as exc:
            return await self._recover(request, exc)
        self._wrote()
        self._feed.poke()
        return await self._answer(request, row)

    async def _answer(self, request: AppendRequest, row: tuple[Any, ...]) -> AppendResult:
        """What ``sk_append``'s reply ``row`` means for ``request``: the policy asked
        when it looks like a conflict at the very head expected
        (:func:`.refusals.filtered_at_head`) — by every try of the append, a retry
        after a lost connection too."""
        if filtered_at_head(request, row):
            async with self._connection() as conn:
                await self._refuse(conn, request)
        return self._result(request, row)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """``sk_append`` as for a new stream (its events from ``base.seq + 1``: the
        head row inserted, refused if the agent exists) and the base snapshot, in one
        transaction (with ``raise_floor``, the feed's floor too: :func:`.feed.floor_over`;
        with ``guard``, its check first, as :meth:`append_together` makes a change)."""
        self._check_can_write()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        if (refused := oversize((request,), len(base.payload))) is not None:
            raise refused
        kept = tuple(kept_keys)
        if not self._opened:
            await self._ensure_open()
        created = dataclasses.replace(request, expected_seq=0)
        tries = 0

        async def op() -> AppendResult:
            nonlocal tries
            tries += 1
            if tries > 1 and await self._landed(created):  # an earlier try committed:
                # its reply was lost, so sending it again would meet its own stream
                return AppendResult(request.agent_id, request.events[0].seq, request.events[-1].seq)
            return await self._from_base_once(created, base, kept, raise_floor, guard)

        result: AppendResult = await self._retrying("append_from_base", op)
        self._wrote()
        self._feed.poke()
        return result

    async def _from_base_once(
        self,
        created: AppendRequest,
        base: RawSnapshot,
        kept: KeptKeys,
        raise_floor: bool,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """One try of :meth:`append_from_base`: the new stream's events and its base
        snapshot in one transaction (a conflict raises: rolled back)."""
        async with self._connection() as conn, conn.transaction():
            if guard is not None:
                await self._change(conn, guard)
            cur = await conn.execute(*self._statement(created))
            row = await cur.fetchone()
            assert row is not None
            result = self._result(created, row)
            snap = (created.agent_id, base.seq, base.timestamp, base.payload, base.checksum)
            await conn.execute(self._sql["snap_save"], (*snap, created.agent_id, base.seq))
            for name, first, last in kept:
                await conn.execute(self._sql["key_keep"], (created.agent_id, name, first, last))
            if raise_floor:
                await floor_over(conn, self._sql["feed_floor_over"], created.agent_id, base.seq)
        return result

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        out, valid = validate_batch(requests)
        if len(valid) == 1 or (len(valid) > 1 and oversize(r for _, r in valid) is not None):
            # (one, or together over what one message takes: each on its own, one
            # over it alone refused by append)
            for i, request in valid:
                try:
                    out[i] = await self.append(request)
                except Exception as exc:
                    out[i] = exc
        elif valid:
            try:
                if not self._opened:
                    await self._ensure_open()
                rows = await self._batch_once([r for _, r in valid])
            except psycopg.Error as exc:
                # Either the whole transaction committed or none of it: settle each
                # request on its own (checking whether it landed when that is unknown).
                await self._settle(valid, exc, out)
            else:
                self._wrote()
                self._feed.poke()
                pairs = zip(valid, rows, strict=True)
                filtered = [r for (_, r), row in pairs if filtered_at_head(r, row)]
                refused: dict[str, AccessDenied] = {}
                if filtered:
                    async with self._connection() as conn:
                        for request in filtered:
                            try:
                                await self._refuse(conn, request)
                            except AccessDenied as exc:
                                refused[request.agent_id] = exc
                for (i, request), row in zip(valid, rows, strict=True):
                    try:
                        out[i] = refused.get(request.agent_id) or self._result(request, row)
                    except (ConflictError, LeaseLost) as exc:
                        out[i] = exc
        return [r if r is not None else BackendError("not attempted") for r in out]

    appends_together = True
    guards_from_base = True  # (_from_base_once: the guard's check in its transaction)
    guards_renames = True  # (KeyExpiry.rename_keys: the same)
    changes_leases_and_rewrites = True
    prunes_together_at_head = True
    checks_absence_together = True
    changes_alone_together = True  # (a prune or rewrite with a check: tiered's)

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        """One ``sk_append_batch`` statement in a transaction rolled back whole when a
        request fails or is a duplicate (:meth:`Backend.append_together`); the
        ``changes`` (a conditional delete, a snapshot, an absence check) go first in
        the same transaction — or alone (:attr:`changes_alone_together`: :mod:`.alone`,
        settled by its transaction id). After a lost connection, whether it committed
        is read back from the first request's stream (all or none landed)."""
        self._check_can_write()
        validate_together(requests, changes, self)
        if not requests and not changes:
            raise ConfigurationError("append_together needs an append or a change")
        if (refused := together_oversize(requests, changes)) is not None:
            raise refused
        if not self._opened:
            await self._ensure_open()
        if not requests:
            return await changes_alone(self, changes)
        return await run_again(lambda again: self._together(requests, changes, again))

    async def _together(
        self,
        requests: Sequence[AppendRequest],
        changes: Sequence[StreamChange],
        again: bool = False,
        tries: list[int] | None = None,
    ) -> list[AppendResult | None]:
        """One try of :meth:`append_together` (``again``: :func:`.rolled_back.run_again`;
        ``tries``: changes alone, its transaction's id added, see :mod:`.alone`)."""
        out: list[AppendResult | None] = []
        checking: list[str] = []  # (the claims under way: see refused_check)
        try:
            async with self._connection() as conn:
                try:
                    async with conn.transaction():
                        if tries is not None:  # (before the COMMIT: .alone asks it)
                            tries.append(await txid(conn))
                        await lock_together(self._sql, conn, requests, changes, checking, again)
                        for change in changes:
                            if not change.absent:
                                await self._change(conn, change)
                        rows: list[tuple[Any, ...]] = []
                        if requests:  # (else changes alone: changes_alone_together)
                            query = self._sql["append_batch"]
                            cur = kept_cursor(conn, query)
                            await cur.execute(query, batch_params(requests))
                            rows = [tuple(row[1:]) for row in await cur.fetchall()]
                        if len(rows) != len(requests):
                            raise psycopg.DataError(
                                f"sk_append_batch answered {len(rows)} of {len(requests)}"
                            )
                        for request, row in zip(requests, rows, strict=True):
                            if filtered_at_head(request, row):
                                await self._refuse(conn, request)  # raises: rolled back
                            result = self._result(request, row)  # raises: rolled back
                            if result.duplicate:
                                out = [result if r is request else None for r in requests]
                                raise Undo
                            out.append(result)
                except Undo:
                    return out
        except psycopg.Error as exc:
            self._wrote()
            if again and isinstance(exc, ROLLED_BACK):
                raise RolledBack from exc
            if not transient(exc):  # refused (a privilege, a constraint): typed, nothing stored
                if (
                    checking
                    and getattr(exc, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
                    and (refused := await refused_check(self, checking)) is not None
                ):
                    raise refused from exc  # (the agent checked, not the first append's)
                raise self._failure(together_what(requests, changes), exc) from exc
            if not requests:  # (changes alone: .alone settles it by its transaction id)
                raise
            try:
                landed = await self._landed(requests[0])
            except psycopg.Error as unsettled:  # (was: the driver's error, untyped)
                raise BackendError(
                    f"postgresql: atomic append failed: {self._reason(exc)}; whether it "
                    f"committed is unknown: {self._reason(unsettled)}",
                    maybe_applied=True,
                ) from exc
            if not landed:
                raise BackendError(
                    f"postgresql: atomic append failed: {self._reason(exc)}"
                ) from exc
            out = [AppendResult(r.agent_id, r.events[0].seq, r.events[-1].seq) for r in requests]
        self._wrote()
        self._feed.poke()
        return out

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        if (refused := snapshot_oversize(agent_id, snapshot)) is not None:
            raise refused
        query = self._sql["snap_save"]
        params = (
            agent_id,
            snapshot.seq,
            snapshot.timestamp,
            snapshot.payload,
            snapshot.checksum,
            agent_id,
            snapshot.seq,
        )

        async def op() -> int:
            async with self._connection() as conn:
                cur = await conn.execute(query, params)
                if (
                    cur.rowcount == 0
                    and (refused := await refusal(self, conn, agent_id, "snapshot")) is not None
                ):
                    raise refused  # the head row hidden by row-level security: not absent
                return int(cur.rowcount)

        saved = await self._retrying("save_snapshot", op)
        self._wrote()
        if saved == 0:
            raise ConflictError(agent_id, snapshot.seq, await self.head(agent_id))

    async def _change(self, conn: Any, change: StreamChange) -> None:
        """Make ``change`` in ``conn``'s transaction; ConflictError (the transaction
        rolls back) when the stream is not where the change expects it."""
        agent_id = change.agent_id
        if change.lease is not None:
            return await self._lease_in(conn, agent_id, change.lease)
        if change.rewrite is not None:
            return await self._rewrite_in(conn, change.rewrite)
        if change.snapshot is not None and change.prune_to is not None:
            # the head row locked before the snapshot's row, as a delete and a plain
            # prune lock them (head row, then snapshots): the other order deadlocked
            # with them, and a deadlock here is not retried (the commit failed)
            await conn.execute(self._sql["prune_lock"], (agent_id, change.prune_to, agent_id))
        if change.snapshot is not None:
            snap = change.snapshot
            cur = await conn.execute(
                self._sql["snap_save"],
                (
                    agent_id,
                    snap.seq,
                    snap.timestamp,
                    snap.payload,
                    snap.checksum,
                    agent_id,
                    snap.seq,
                ),
            )
            if cur.rowcount == 0:
                if (refused := await refusal(self, conn, agent_id, "snapshot")) is not None:
                    raise refused  # the head row hidden by row-level security: not absent
                raise ConflictError(agent_id, snap.seq, await self._head_in(conn, agent_id))
        if change.prune_to is not None:  # (its identity check rolls back the snapshot too)
            await self._prune_in(
                conn,
                agent_id,
                change.prune_to,
                change.drop_snapshots,
                change.prune_head,
                change.prune_checksum,
            )
        if change.delete_at is None:
            return
        if change.delete_checksum is None:
            cur = await conn.execute(self._sql["del_agent_at"], (agent_id, change.delete_at))
        else:  # the head record's identity checked in the same statement
            cur = await conn.execute(
                self._sql["del_agent_at_sum"], (agent_id, change.delete_at, change.delete_checksum)
            )
        if cur.rowcount == 0:
            assert change.delete_at is not None
            if (refused := await refusal(self, conn, agent_id)) is not None:
                raise refused  # filtered away by row-level security: not a conflict
            raise ConflictError(agent_id, change.delete_at, await self._head_in(conn, agent_id))
        for name in ("del_events", "del_snaps", "del_keys"):
            await conn.execute(self._sql[name], (agent_id,))

    async def _lease_in(self, conn: Any, agent_id: str, lease: LeaseChange) -> None:
        """A lease grant or release in ``conn``'s transaction (one conditional write;
        when it writes nothing, the stored lease says why: LeaseHeld, ConflictError
        or LeaseLost, and the transaction rolls back)."""
        params: dict[str, Any] = {"agent": agent_id, "holder": lease.holder, "token": lease.token}
        if lease.ttl is not None:
            params["ttl"] = lease.ttl
            # (the statement refuses a token other than the one lease_next gives)
            cur = await conn.execute(self._sql["lease_put"], params)
            if await cur.fetchone() is not None:
                return
            current = await self._lease_now(conn, agent_id)
            stored = current.token if current is not None else 0
            if (
                current is None
                or current.holder is None
                or await self._lease_next_in(conn, agent_id) != lease.token
            ):
                raise ConflictError(agent_id, lease.token - 1, stored)
            raise LeaseHeld(agent_id, current.holder, current.expires_at)
        cur = await conn.execute(self._sql["lease_release"], params)
        if await cur.fetchone() is None:
            if (refused := await refusal(self, conn, agent_id, "lease")) is not None:
                raise refused
            raise lease_lost(
                agent_id, lease.holder, lease.token, await self._lease_now(conn, agent_id)
            )

    async def _lease_next_in(self, conn: Any, agent_id: str) -> int:
        """The agent's next token; the timeline's floor kept (see .leases)."""
        cur = await conn.execute(self._sql["lease_next"], {"agent": agent_id})
        row = await cur.fetchone()
        self._lease_floor = int(row[1])
        return int(row[0])

    async def _lease_now(self, conn: Any, agent_id: str) -> LeaseInfo | None:
        cur = await conn.execute(self._sql["lease_get"], {"agent": agent_id})
        row = await cur.fetchone()
        return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2])) if row else None

    async def _prune_in(
        self,
        conn: Any,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int],
        expected: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """``prune`` in ``conn``'s transaction (the head row locked ``FOR UPDATE``);
        ConfigurationError when its preconditions fail, ConflictError when the head is
        not ``expected`` or its event not the record of ``checksum`` (rolled back)."""
        drop = sorted(set(drop_snapshots))
        cur = await conn.execute(self._sql["prune_lock"], (agent_id, base_seq, agent_id))
        row = await cur.fetchone()
        if row is None and (refused := await refusal(self, conn, agent_id, "prune")) is not None:
            raise refused  # the head row filtered away by row-level security: not absent
        head = int(row[0]) if row is not None else 0
        stored: bytes | None = None
        if expected is not None and checksum is not None and head == expected:
            # (under the head row's lock: no delete or append of the agent in between)
            cur = await conn.execute(self._sql["prune_head_sum"], (agent_id, head))
            found = await cur.fetchone()
            stored = bytes(found[0]) if found is not None else None
        check_prune_at(agent_id, head, expected, checksum, lambda: stored)
        cur = await conn.execute(self._sql["prune_base"], (agent_id,)) if drop else None
        base = int((await cur.fetchone())[0] or 1) - 1 if cur is not None else 0  # (after the lock)
        check_prune(agent_id, head, base_seq, bool(row and row[1]), drop, base)
        if base_seq:
            for name in ("prune_events", "prune_snaps_below"):  # (idempotency records stay)
                await conn.execute(self._sql[name], (agent_id, base_seq))
        if drop:
            await conn.execute(self._sql["prune_snaps"], (agent_id, drop))

    async def _refuse(self, conn: Any, request: AppendRequest) -> None:
        """Raise the AccessDenied of ``request``, answered a conflict at the very head
        it expected (:func:`.refusals.filtered_at_head`), when row-level security filtered its head
        row's UPDATE away (the role may not write the agent's namespace)."""
        if (refused := await refusal(self, conn, request.agent_id, "append")) is not None:
            raise refused

    async def _head_in(self, conn: Any, agent_id: str) -> int:
        cur = await conn.execute(self._sql["head"], (agent_id,))
        row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

    async def _settle(
        self,
        valid: list[tuple[int, AppendRequest]],
        exc: psycopg.Error,
        out: list[AppendResult | BaseException | None],
    ) -> None:
        """Settle the requests of a failed batch statement, each on its own.

        A permanent error (a constraint, a ``statement_timeout``) rolled the whole
        statement back: every request is sent again alone, so the good ones commit
        and the faulty one gets its own error. After a lost connection each request
        is recovered (did it land?). Agents are settled concurrently — one agent's
        requests in their order — so no request waits behind another's failure.
        """
        ambiguous = transient(exc)
        chains: dict[str, list[tuple[int, AppendRequest]]] = {}
        for item in valid:
            chains.setdefault(item[1].agent_id, []).append(item)

        async def settle(chain: list[tuple[int, AppendRequest]]) -> None:
            for i, request in chain:
                try:
                    if ambiguous:
                        out[i] = await self._recover(request, exc)
                    else:
                        out[i] = await self.append(request)
                except Exception as inner:
                    out[i] = inner

        await asyncio.gather(*(settle(chain) for chain in chains.values()))

    async def _batch_once(self, requests: Sequence[AppendRequest]) -> list[tuple[Any, ...]]:
        """Every request in ONE ``sk_append_batch`` statement: one round trip, one commit."""
        query = self._sql["append_batch"]
        async with self._connection() as conn:
            cur = kept_cursor(conn, query)
            await cur.execute(query, batch_params(requests))
            rows = await cur.fetchall()
        if len(rows) != len(requests):
            raise psycopg.DataError(f"sk_append_batch answered {len(rows)} of {len(requests)}")
        return [tuple(row[1:]) for row in rows]

    async def _recover(self, request: AppendRequest, exc: psycopg.Error) -> AppendResult:
        """Settle an append whose outcome is unknown (its connection failed): see
        :meth:`Reconnecting.settle_append` — what is stored at the request's seqs is
        compared with its events. A constraint violation is final."""
        self._wrote()
        if isinstance(exc, psycopg.errors.IntegrityError):
            raise BackendRejected(
                f"postgresql: constraint violated appending to {request.agent_id!r}: "
                f"{self._reason(exc)}",
                sqlstate=exc.sqlstate,
            ) from exc
        return await self._reconnect.settle_append(
            request,
            exc,
            landed=self._landed,
            submit=self._submit,
            # a request that never got a connection was never sent
            maybe_applied=self._opened and not isinstance(exc, PoolTimeout),
        )

    async def _submit(self, request: AppendRequest) -> AppendResult:
        # (a retry: a filtered UPDATE is the policy's refusal here too, not a conflict
        # the caller would answer by reloading and writing again)
        return await self._answer(request, await self._append_once(request))

    async def _landed(self, request: AppendRequest) -> bool:
        first, last = request.events[0].seq, request.events[-1].seq
        async with self._connection() as conn:
            cur = conn.cursor(binary=True)
            await cur.execute(
                self._sql["read"],
                (request.agent_id, first - 1, last, len(request.events)),
            )
            rows = await cur.fetchall()
            stored = [RawEvent(r[0], r[1], r[2], bytes(r[3]), bytes(r[4])) for r in rows]
            if stored != list(request.events):
                return False
            if request.idempotency_key is None:
                return True
            await cur.execute(self._sql["key"], (request.agent_id, request.idempotency_key))
            row = await cur.fetchone()
        return row is not None and (int(row[0]), int(row[1])) == (first, last)
