"""The appends: one request's rows in the caller's transaction (head compare-and-set,
idempotency key, events, snapshot), batches and appends made together, each
committed or refused as a whole."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence

from ...errors import BackendError, ConfigurationError, ConflictError, LeaseLost, ReadOnlyStore
from ...records import AppendRequest, AppendResult, EventType, RawSnapshot, StreamChange
from ..base import check_fence, validate_request, validate_together
from .base import LENGTH_LIMITS
from .base import translated as _translated
from .checkpoints import _pages
from .engine import SQLiteEngine, _Executes, _Outcome, _Queued
from .statements import (
    _CLAIM,
    _CLAIM_KEY,
    _CLAIM_ROWS,
    _CREATE,
    _FORGET_KEY,
    _INSERT_EVENT,
    _INSERT_ROWS,
    _KEY_RANGE,
    _TAG_CHECK,
)


def _agent_of(path: str, requests: Sequence[_Queued]) -> str:
    """The agent a failed write of ``requests`` names (its refusal as too large: a
    :class:`~statekeeper.errors.StateTooLarge` is about it): the one with a record over
    the file's length limit, else the only one written to; ``"*"`` when several are."""
    limit = LENGTH_LIMITS.get(path)
    agents: list[str] = []
    for queued in requests:
        if isinstance(queued, AppendRequest):
            agent_id, snapshot = queued.agent_id, queued.snapshot
            sizes = [len(e.payload) for e in queued.events]
        else:  # (an append_next's row)
            agent_id, snapshot, sizes = queued[0], queued[7], [len(queued[3])]
        if snapshot is not None:
            sizes.append(len(snapshot.payload))
        if limit is not None and max(sizes) > limit:
            return agent_id
        agents.append(agent_id)
    return agents[0] if len(set(agents)) == 1 else "*"


_PATCH = EventType.PATCH
#: what a lone append binds its blobs as (see ``SQLiteBackend._append_row``)
_bind = bytearray


def _bind_tag(tag: bytes | None) -> bytearray | None:
    """A head tag bound as :data:`_bind` binds it (None: none, SQL NULL)."""
    return None if tag is None else _bind(tag)


class SQLiteAppends(SQLiteEngine):
    """Appends in the caller's write transaction, alone, batched or together."""

    def _append_one(self, conn: _Executes, request: AppendRequest) -> AppendResult:
        """One append inside the caller's immediate transaction. A refusal
        (:class:`ConflictError`, :class:`LeaseLost`) leaves nothing written (a key
        claimed before the head refused is deleted again); only a constraint
        (``sqlite3.IntegrityError``) can fire after something was.

        Its BLOBs (head tags, payloads, checksums) are bound as ``bytearray``, as
        :meth:`_append_row` binds them (why there): this is the append of a new
        stream, of a save on a state read from storage, of a keyed or fenced write
        and of a batch's several events. The stored values are the same BLOBs."""
        agent_id, key, expected = request.agent_id, request.idempotency_key, request.expected_seq
        fence = request.fence
        tag = _bind_tag(request.head_tag)
        events = request.events
        first, last = events[0], events[-1]
        if key is not None:
            if fence is not None:
                # the fence before the key: a stale writer learns it lost the lease
                check_fence(agent_id, fence, self._lease_row(conn, agent_id))
                fence = None
            # the key claimed first: its SELECT only when it is already there (a
            # duplicate), not on every keyed append; undone below if the head refuses
            claimed = conn.execute(
                _CLAIM_KEY, (agent_id, key, first.seq, last.seq, first.timestamp)
            ).rowcount
            if claimed != 1:
                row = conn.execute(_KEY_RANGE, (agent_id, key)).fetchone()
                return AppendResult(agent_id, row[0], row[1], duplicate=True)
        # Compare-and-set the head first: one statement checks the head (and the fence,
        # inside the immediate transaction: no grant can slip in between) and claims it.
        if fence is None:
            if expected == 0:
                claimed = conn.execute(
                    _CREATE, (agent_id, last.seq, first.timestamp, last.timestamp, tag)
                ).rowcount
            elif request.check_tag:
                claimed = conn.execute(
                    _CLAIM[True],
                    (
                        last.seq,
                        last.timestamp,
                        tag,
                        agent_id,
                        expected,
                        _bind_tag(request.expected_tag),
                    ),
                ).rowcount
            else:
                claimed = conn.execute(
                    _CLAIM[False], (last.seq, last.timestamp, tag, agent_id, expected)
                ).rowcount
        elif expected == 0:
            claimed = conn.execute(
                "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
                " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sk_leases"
                " WHERE agent_id = ? AND holder = ? AND token = ?)"
                " ON CONFLICT(agent_id) DO NOTHING",
                (
                    agent_id,
                    last.seq,
                    first.timestamp,
                    last.timestamp,
                    tag,
                    agent_id,
                    *fence,
                ),
            ).rowcount
        else:
            claimed = conn.execute(
                "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
                " WHERE agent_id = ? AND head_seq = ?"
                + _TAG_CHECK[request.check_tag]
                + " AND EXISTS (SELECT 1 FROM sk_leases"
                " WHERE agent_id = ? AND holder = ? AND token = ?)",
                (last.seq, last.timestamp, tag, agent_id, expected)
                + ((_bind_tag(request.expected_tag),) if request.check_tag else ())
                + (agent_id, *fence),
            ).rowcount
        if claimed != 1:  # refused: find out why (the fence first), nothing left written
            if key is not None:
                conn.execute(_FORGET_KEY, (agent_id, key))
            if fence is not None:
                check_fence(agent_id, fence, self._lease_row(conn, agent_id))
            row = conn.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            raise ConflictError(agent_id, expected, row[0] if row is not None else 0)
        insert = _INSERT_EVENT
        if len(events) == 1:
            conn.execute(
                insert,
                (
                    agent_id,
                    first.seq,
                    first.type,
                    first.timestamp,
                    _bind(first.payload),
                    _bind(first.checksum),
                ),
            )
        else:
            conn.executemany(
                insert,
                [
                    (agent_id, e.seq, e.type, e.timestamp, _bind(e.payload), _bind(e.checksum))
                    for e in events
                ],
            )
        snap = request.snapshot
        if snap is not None:
            self._put_snapshot(conn, agent_id, snap)
        return AppendResult(agent_id, first.seq, last.seq)

    def _append_row(
        self,
        cur: _Executes,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None,
    ) -> None:
        """:meth:`_append_one` of :meth:`append_next`'s one event, bound from its
        arguments: the head's compare-and-set (seq and tag), then the event row.

        The blobs are bound as ``bytearray``: CPython's ``sqlite3`` binds ``int``,
        ``float``, ``str`` and ``bytearray`` directly but looks every other type —
        ``bytes`` included — up in its adapters first (``__adapt__`` and
        ``__conform__``, each a formatted and cleared ``AttributeError``): 4 bytes
        parameters cost 7.1 us an ``execute`` against 3.6 us as ``bytearray`` copies
        (timeit, ``SELECT ?, ?, ?, ?``), ~10k instructions a save
        (docs/benchmarks.md, "CPU per save: lists that grow, blobs bound as they are").
        Registering an adapter instead would change every ``sqlite3`` user of the
        process. The stored values are the same BLOBs."""
        tag = None if head_tag is None else _bind(head_tag)
        if seq == 1:
            claimed = cur.execute(_CREATE, (agent_id, 1, timestamp, timestamp, tag)).rowcount
        else:
            claimed = cur.execute(
                _CLAIM[True],
                (
                    seq,
                    timestamp,
                    tag,
                    agent_id,
                    seq - 1,
                    None if expected_tag is None else _bind(expected_tag),
                ),
            ).rowcount
        if claimed != 1:  # refused, nothing written
            row = cur.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            raise ConflictError(agent_id, seq - 1, row[0] if row is not None else 0)
        cur.execute(
            _INSERT_EVENT, (agent_id, seq, _PATCH, timestamp, _bind(payload), _bind(checksum))
        )
        if snapshot is not None:
            self._put_snapshot(cur, agent_id, snapshot)

    def _append_batch_sync(self, requests: Sequence[_Queued]) -> list[_Outcome]:
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:  # (as _translated, without a context manager: this runs on every commit)
            self._begin(cur)
            try:
                try:
                    results = self._append_all(cur, requests)
                except sqlite3.IntegrityError as exc:
                    # a constraint fired after some rows of a request were written
                    cur.execute("ROLLBACK")
                    if len(requests) == 1:  # alone, the transaction was its unit
                        return [self._failure(exc)]
                    self._begin(cur)
                    results = self._append_all(cur, requests, savepoints=True)
                cur.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.append_commits += 1
        except sqlite3.Error:
            with _translated(self.path, _agent_of(self.path, requests)):
                raise
        self._wrote(_pages(requests), held=True)  # (every caller holds _writer_busy)
        return results

    def _append_together_sync(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange]
    ) -> list[AppendResult | None]:
        """All the requests (and changes) in one transaction, rolled back whole when
        one fails or is a duplicate (see :meth:`Backend.append_together`)."""
        conn = self._writer
        assert conn is not None
        results: list[AppendResult | None] = []
        try:
            self._begin(conn)
            try:
                for change in changes:
                    self._change(conn, change)
                for request in requests:
                    result = self._append_one(conn, request)
                    if result.duplicate:
                        conn.execute("ROLLBACK")
                        return [result if r is request else None for r in requests]
                    results.append(result)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.append_commits += 1
        except sqlite3.IntegrityError as exc:
            raise self._failure(exc) from None
        except sqlite3.Error:
            with _translated(self.path, _agent_of(self.path, requests)):
                raise
        self._wrote(_pages(requests), held=True)  # (its caller, _write, holds _writer_busy)
        return results

    def _append_all(
        self, conn: _Executes, requests: Sequence[_Queued], savepoints: bool = False
    ) -> list[_Outcome]:
        """Each request succeeds or fails on its own. A refusal is raised before the
        request wrote anything, so it needs no undo; without ``savepoints`` a
        constraint firing mid-request propagates (the caller rolls back and retries
        the batch with one savepoint per request). A request may be the arguments of
        :meth:`append_next` as they are (its result: None).

        Such a row goes to :meth:`_append_row` as it is: that binds its BLOBs as
        ``bytearray`` itself (they were copied twice here before: 62.6 -> 31.6 bytecodes
        a batched save, ``bench_save_instructions.py --bytecodes sk-group-16``)."""
        if not savepoints and len(requests) > 1:
            rows = self._append_rows(conn, requests)
            if rows is None:
                rows = self._append_creates(conn, requests)
            if rows is not None:
                return rows
        results: list[_Outcome] = []
        append_row = self._append_row
        for request in requests:
            if savepoints:
                conn.execute("SAVEPOINT sk_req")
            try:
                if isinstance(request, tuple):
                    append_row(conn, *request)
                    results.append(None)
                else:
                    results.append(self._append_one(conn, request))
            except (ConflictError, LeaseLost) as exc:
                results.append(exc)
            except sqlite3.IntegrityError as exc:
                if not savepoints:
                    raise
                conn.execute("ROLLBACK TO sk_req")
                results.append(self._failure(exc))
            if savepoints:
                conn.execute("RELEASE sk_req")
        return results

    def _append_rows(self, conn: _Executes, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """:meth:`_append_all` of a batch of :meth:`append_next` rows on existing heads
        (``seq > 1``): every head's compare-and-set in one ``executemany`` and every
        event row in another, instead of two ``execute`` calls a row (the group path at
        16 agents: a batch of ~8 rows). None, with nothing written, when a request is not
        such a row. When a head refuses (the claims' summed ``rowcount`` falls short),
        the transaction is rolled back and begun again and None returned: the caller
        writes the batch row by row, which tells each append its own outcome. A
        constraint firing on an event row propagates, as from :meth:`_append_all`.

        The parameters are made by C code, not a Python loop: the rows transposed into
        columns (``zip(*rows)``), the BLOB columns copied to ``bytearray`` by ``map``
        (see :meth:`_append_row` for why ``bytearray``), the columns zipped back into
        each statement's parameter rows, whose numbered parameters take a row's
        columns in place (``?1 - 1``: the expected head) — a fixed number of Python
        calls a batch, none a row (72 bytecodes a batched save before,
        ``bench_save_instructions.py --bytecodes sk-group-16``; docs/benchmarks.md,
        "group11c"). A request that is not a row (an :class:`AppendRequest` cannot be
        transposed) raises ``TypeError`` there; a batch with a row without head tags (a
        store that keeps none) takes :meth:`_append_one_by_one`."""
        try:
            agent_ids, seqs, stamps, payloads, checksums, tags, expected, snaps = zip(
                *requests, strict=True
            )
        except (TypeError, ValueError):  # not every request is a row
            return None
        if 1 in seqs:  # a new stream: created row by row
            return None
        if None in tags or None in expected:
            return self._append_one_by_one(conn, requests)
        claims = list(
            zip(seqs, stamps, map(_bind, tags), agent_ids, map(_bind, expected), strict=True)
        )
        if conn.executemany(_CLAIM_ROWS, claims).rowcount != len(claims):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(
            _INSERT_ROWS,
            zip(agent_ids, seqs, stamps, map(_bind, payloads), map(_bind, checksums), strict=True),
        )
        if snaps.count(None) != len(snaps):  # (a snapshot: one save in snapshot_every)
            for agent_id, snap in zip(agent_ids, snaps, strict=True):
                if snap is not None:
                    self._put_snapshot(conn, agent_id, snap)
        return [None] * len(claims)

    def _append_creates(
        self, conn: _Executes, requests: Sequence[_Queued]
    ) -> list[_Outcome] | None:
        """:meth:`_append_all` of a batch of new streams' first appends — requests of
        one event each, ``expected_seq`` 0, without key, fence nor snapshot: the first
        save of each of N agents arriving together (16 agents: every agent's first
        save shares one commit) —, every head created by one ``executemany`` and every
        event row by another, instead of :meth:`_append_one`'s Python and two
        ``execute`` calls a request. None, with nothing written, when a request is not
        such a create. When a head is there already (the summed ``rowcount`` of the
        heads' ``INSERT … DO NOTHING`` falls short: an agent another writer created,
        or two creates of one agent), the transaction is rolled back and begun again
        and None returned: the caller writes the batch request by request, which
        tells each its own outcome (as :meth:`_append_rows` does). The statements, the
        stored rows and the results are :meth:`_append_one`'s."""
        heads = []
        rows = []
        results: list[_Outcome] = []
        for request in requests:
            if (
                not isinstance(request, AppendRequest)  # (a row: append_next's arguments)
                or request.expected_seq
                or request.idempotency_key is not None
                or request.fence is not None
                or request.snapshot is not None
                or len(events := request.events) != 1
            ):
                return None
            agent_id = request.agent_id
            event = events[0]
            seq, stamp = event.seq, event.timestamp
            heads.append((agent_id, seq, stamp, stamp, _bind_tag(request.head_tag)))
            rows.append(
                (agent_id, seq, event.type, stamp, _bind(event.payload), _bind(event.checksum))
            )
            results.append(AppendResult(agent_id, seq, seq))
        if conn.executemany(_CREATE, heads).rowcount != len(heads):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(_INSERT_EVENT, rows)
        return results

    def _append_one_by_one(
        self, conn: _Executes, requests: Sequence[_Queued]
    ) -> list[_Outcome] | None:
        """:meth:`_append_rows` of a batch of rows that may have no head tags (a store
        without them): the parameters built row by row."""
        claims = []
        events = []
        snapshots = []
        for request in requests:
            agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snap = request  # type: ignore[misc]
            if snap is not None:
                snapshots.append((agent_id, snap))
            claims.append(
                (
                    seq,
                    timestamp,
                    None if head_tag is None else _bind(head_tag),
                    agent_id,
                    seq - 1,
                    None if expected_tag is None else _bind(expected_tag),
                )
            )
            events.append((agent_id, seq, _PATCH, timestamp, _bind(payload), _bind(checksum)))
        if conn.executemany(_CLAIM[True], claims).rowcount != len(claims):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(_INSERT_EVENT, events)
        for agent_id, snap in snapshots:
            self._put_snapshot(conn, agent_id, snap)
        return [None] * len(claims)

    def _failure(self, exc: Exception) -> BaseException:
        if isinstance(exc, ConflictError | LeaseLost):
            return exc
        return BackendError(f"{self.path}: constraint violated: {exc}")

    async def append(self, request: AppendRequest) -> AppendResult:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_request(request)
        result = await self._commit_one(request, None)
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, AppendResult)
        return result

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_together(requests, changes, self)
        done: list[AppendResult | None] = await self._write(
            self._append_together_sync, requests, changes
        )
        self._committed(len(requests))
        return done

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        valid: list[AppendRequest] = []
        errors: dict[int, BaseException] = {}
        for i, request in enumerate(requests):
            try:
                validate_request(request)
                valid.append(request)
            except ConfigurationError as exc:
                errors[i] = exc
        done: list[AppendResult | BaseException]
        if not valid:
            done = []
        elif len(valid) == 1 and self.inline_writes:
            one = await self._join_commit(valid[0], asyncio.get_running_loop())
            assert one is not None  # (a request's outcome)
            done = [one]
        else:  # several appends: the writer thread, while the loop prepares the next
            done = await self._write(self._append_batch_sync, valid, inline=False)
            self._committed(len(valid))
        it = iter(done)
        return [errors[i] if i in errors else next(it) for i in range(len(requests))]
