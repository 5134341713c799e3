"""Writing the audit log: one entry, an entry in one commit with the change it records,
and entries written ahead of a mutation (and voided when it fails)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConflictError
from ..records import AppendRequest, AppendResult, RewriteRequest, StreamChange
from ..records import AuditMark as Mark
from ..store.conditional import check_together_at
from .audit_chain import _AuditChain
from .audit_records import _body, _mark_body

__all__: list[str] = []


class _AuditWriter(_AuditChain):
    """Recording entries (:class:`~statekeeper.governance.audit.AuditLog`)."""

    # -- writing ----------------------------------------------------------------------

    async def record(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one entry; returns its seq in the log."""
        data = _body(operation, principal, agent_id, first_seq, last_seq, outcome, detail)
        async with self._turn():
            _, _, head = await self._on_the_log((data,), self.backend.append)
            await self._wrote(head)
            return head[0]

    @property
    def records_with_writes(self) -> bool:
        """True when :meth:`record_with` is offered (the engine commits two streams'
        appends atomically)."""
        return self.backend.appends_together

    async def record_with(
        self,
        request: AppendRequest,
        operation: str,
        *,
        principal: str | None,
        detail: Mapping[str, Any] | None = None,
    ) -> AppendResult:
        """Append ``request`` (a mutation of an agent) and its entry (outcome ``ok``,
        the request's seq range) in ONE atomic commit: after a crash at any point
        both exist or neither does.

        A conflict of the agent's append is raised (nothing written: the writer makes
        it again on a fresh read); a conflict on the log (another process recorded
        first) is retried here. A duplicate (idempotency key already used) writes
        nothing, entry included: its result is returned and the caller records it."""
        events = request.events
        data = _body(
            operation,
            principal,
            request.agent_id,
            events[0].seq,
            events[-1].seq,
            "ok",
            detail,
        )
        async with self._turn():
            results, _, head = await self._on_the_log(
                (data,), lambda entry: self.backend.append_together([request, entry])
            )
            result = results[0]
            assert result is not None
            if not result.duplicate:
                await self._wrote(head)
            return result

    async def record_with_change(
        self,
        change: StreamChange,
        operation: str,
        *,
        principal: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
        preceding: Sequence[Mapping[str, Any]] = (),
        appends: Sequence[AppendRequest] = (),
    ) -> None:
        """Make ``change`` (a delete, a snapshot or a prune of an agent) and write its
        entry (``outcome``) in ONE atomic commit (``Backend.append_together``): after
        a crash at any point both exist or neither does. ``preceding``: entries of the
        same agent written just before it, in that commit (``{"op", "outcome",
        "detail", "first_seq", "last_seq"}``: a retention purge before its delete);
        ``appends``: other streams' appends in that commit (a delete's feed tombstone).
        A conflict of the change or of ``appends`` is raised (nothing written); one on
        the log (another writer recorded first) is retried here."""
        bodies = [
            _body(
                e["op"],
                principal,
                change.agent_id,
                e.get("first_seq"),
                e.get("last_seq"),
                e.get("outcome", "ok"),
                e.get("detail"),
            )
            for e in preceding
        ]
        data = _body(operation, principal, change.agent_id, first_seq, last_seq, outcome, detail)
        bodies.append(data)
        check_together_at(self.backend, [change])  # (an engine that would ignore prune_head)
        async with self._turn():
            _, _, head = await self._on_the_log(
                bodies, lambda entry: self.backend.append_together([entry, *appends], [change])
            )
            await self._wrote(head)

    async def rewrite_with(
        self, requests: Sequence[RewriteRequest], marks: Sequence[Mark]
    ) -> list[bool]:
        """Apply ``requests`` (rewrites of distinct agents: a page of a schema
        migration) with the entry ``marks[i]`` of each, ALL in one commit
        (``Backend.append_together``): after a crash at any point a rewrite and its
        entry both exist or neither does. Like ``Backend.rewrite_many``: True for each
        request applied, False for one whose head moved meanwhile (it is left out,
        with its entry, and the others committed without it)."""
        done = [False] * len(requests)
        pending = list(range(len(requests)))
        async with self._turn():
            while pending:
                bodies = [_mark_body(marks[i], None) for i in pending]
                changes = [StreamChange(requests[i].agent_id, rewrite=requests[i]) for i in pending]
                try:
                    _, _, head = await self._on_the_log(
                        bodies,
                        lambda entry, changes=changes: self.backend.append_together(  # type: ignore[misc]
                            [entry], changes
                        ),
                    )
                except ConflictError as exc:
                    moved = next((i for i in pending if requests[i].agent_id == exc.agent_id), None)
                    if moved is None:
                        raise
                    pending.remove(moved)  # nothing was written: the others go again
                    continue
                await self._wrote(head)
                for i in pending:
                    done[i] = True
                break
        return done

    async def record_ahead(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        ahead: Any = True,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
    ) -> int:
        """Record, BEFORE making it, a mutation that cannot share a commit with its
        entry (delete, snapshot, lease, purge, forget...): the entry is marked
        ``ahead`` (with ``ahead``, what :meth:`verify` checks to tell whether it was
        applied); returns its seq, for :meth:`void` when the mutation then fails."""
        data = _body(
            operation,
            principal,
            agent_id,
            first_seq,
            last_seq,
            outcome,
            {**(detail or {}), "ahead": ahead},
        )
        return await self._append_entries((data,))

    async def record_ahead_many(self, marks: Sequence[tuple[Mark, Any]]) -> int:
        """:meth:`record_ahead` of several mutations at once (a page of a schema
        migration's rewrites): one entry per ``(mark, ahead)``, in order, appended
        together; the seq of the first (the others follow it)."""
        return await self._append_entries([_mark_body(m, ahead) for m, ahead in marks])

    async def void_many(self, voids: Sequence[tuple[int, Mark]], exc: BaseException) -> None:
        """:meth:`void` of several entries written by :meth:`record_ahead_many` (each
        ``(entry seq, its mark)``), appended together: their mutations failed."""
        bodies = [
            _body(
                m.operation,
                m.principal,
                m.agent_id,
                None,
                None,
                f"error:{type(exc).__name__}",
                {"voids": entry_seq},
            )
            for entry_seq, m in voids
        ]
        if bodies:
            await self._append_entries(bodies)

    async def void(
        self,
        entry_seq: int,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        exc: BaseException,
    ) -> None:
        """Record that the mutation announced by entry ``entry_seq`` (see
        :meth:`record_ahead`) failed: nothing, or not all of it, was done."""
        data = _body(
            operation,
            principal,
            agent_id,
            None,
            None,
            f"error:{type(exc).__name__}",
            {"voids": entry_seq},
        )
        await self._append_entries((data,))
