"""Applying migrations' head rewrites: one agent's (:func:`apply`) or a page's at once
(:func:`apply_page`), each with its audit entry (committed with it, or written first and
voided when it is not applied), and after it the store's own view brought along — the
cached state dropped, the automatic witness's mark renewed (:func:`applied`;
:func:`before_rewrites` replaces the marks before a page). Shared by
:func:`~.migrate.migrate`, :func:`~.rollback.rollback` and :func:`~.rollback.finalize`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import ConflictError, RewriteBelowPrunedBase
from ..records import AuditMark
from ..store.governed import governance_of
from .report import each
from .rewrite import Rewrite

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["PAGE_CONCURRENCY", "applied", "apply", "apply_page", "before_rewrites"]

#: rewrites in flight at once on an engine without a native rewrite_many
PAGE_CONCURRENCY = 64


async def before_rewrites(store: StateStore, agent_ids: list[str]) -> None:
    """Before a page of rewrites: the store's witness replaces its marks of those agents
    by deletions (a mark of a link the rewrite replaces would read as a rollback)."""
    witness = getattr(store, "_witness", None)
    if witness is not None:
        await witness.rewriting(agent_ids)


async def _announce(store: StateStore, batch: list[Rewrite]) -> tuple[int, list[AuditMark]] | None:
    """The ``migrate`` entries of ``batch``, one per agent, written BEFORE its rewrites
    (entry first, docs/governance.md), each naming the checksum the agent's head event
    has once rewritten, so that ``audit verify`` reports one whose rewrite a crash
    stopped (``unapplied``). None on a store without an audit log that can."""
    gov = governance_of(store)
    many = getattr(gov.audit if gov is not None else None, "record_ahead_many", None)
    if gov is None or many is None or not batch:
        return None
    marks: list[AuditMark] = []
    pairs: list[tuple[AuditMark, Any]] = []
    for rewrite in batch:
        request = rewrite.request
        seq = request.expected_seq
        event = next((e for e in request.events if e.seq == seq), None)
        mark = AuditMark("migrate", gov.principal, request.agent_id, seq, seq)
        marks.append(mark)
        pairs.append((mark, event.checksum.hex() if event is not None else True))
    first: int = await many(pairs)
    return first, marks


async def _void(
    store: StateStore,
    announced: tuple[int, list[AuditMark]] | None,
    indexes: list[int],
    exc: BaseException,
) -> None:
    """Void the entries (:func:`_announce`) of the rewrites at ``indexes``: not applied."""
    gov = governance_of(store)
    void_many = getattr(gov.audit if gov is not None else None, "void_many", None)
    if announced is None or void_many is None or not isinstance(exc, Exception):
        return
    first, marks = announced
    await void_many([(first + i, marks[i]) for i in indexes], exc)


def _together(store: StateStore) -> Any:
    """The store's audit log when a page's rewrites and their entries can be ONE commit
    (:meth:`~statekeeper.governance.AuditLog.rewrite_with`, on an engine with
    ``append_together``: memory, SQLite, PostgreSQL), else None (no log, or the
    entries go first)."""
    gov = governance_of(store)
    log = gov.audit if gov is not None else None
    if (
        log is None
        or not callable(getattr(log, "rewrite_with", None))
        or not getattr(log, "records_with_writes", False)
        or getattr(log, "backend", None) is not store.backend
        or not store.backend.changes_leases_and_rewrites
    ):
        return None
    return log


def _marks(store: StateStore, batch: list[Rewrite]) -> list[AuditMark]:
    gov = governance_of(store)
    principal = gov.principal if gov is not None else None
    return [
        AuditMark(
            "migrate",
            principal,
            r.request.agent_id,
            r.request.expected_seq,
            r.request.expected_seq,
        )
        for r in batch
    ]


async def apply(store: StateStore, rewrite: Rewrite) -> None:
    """Apply ``rewrite`` (ConflictError when the head moved), then drop this process's
    cached state of the agent (a later read would fold it again anyway: the event at
    its head has a new checksum) and note the new head link in the store's witness (a
    mark of the old link would read as the store rolled back). On a store with an
    audit log its ``migrate`` entry is committed with it (memory, SQLite, PostgreSQL)
    or written first (voided when it fails)."""
    log = _together(store)
    if log is not None:
        done = await log.rewrite_with([rewrite.request], _marks(store, [rewrite]))
        if not done[0]:
            request = rewrite.request
            raise ConflictError(
                request.agent_id, request.expected_seq, await store.backend.head(request.agent_id)
            )
        applied(store, rewrite)
        return
    announced = await _announce(store, [rewrite])
    try:
        await store.backend.rewrite(rewrite.request)
    except BaseException as exc:
        if getattr(exc, "maybe_applied", False):  # (part-way: as in apply_page)
            _forget(store, rewrite.request.agent_id)
        await _void(store, announced, [0], exc)
        raise
    applied(store, rewrite)


async def apply_page(store: StateStore, batch: list[Rewrite]) -> list[Rewrite]:
    """Apply a page's rewrites with :meth:`Backend.rewrite_many` (one transaction on
    SQLite, one statement on PostgreSQL; in turn elsewhere), then note each applied
    one (:func:`applied`). Returns those not applied: their head moved meanwhile, or an
    engine refused one planned before a retention prune (``RewriteBelowPrunedBase``:
    where the page is one commit, nothing of it was written, so every rewrite of it is
    returned; an engine rewriting one agent at a time refuses that agent's alone, and
    S3 may refuse one part-way, some of its records written: ``maybe_applied``), for
    the caller to read and plan again."""
    await asyncio.sleep(0)  # let the live system run between pages (memory never waits)
    if not batch:
        return []
    backend = store.backend
    moved: list[Rewrite] = []
    log = _together(store)
    if log is not None and len({r.request.agent_id for r in batch}) == len(batch):
        # the page's rewrites and their entries: one commit
        try:
            done = await log.rewrite_with([r.request for r in batch], _marks(store, batch))
        except RewriteBelowPrunedBase:  # (one commit: none of the page, nor its entries)
            return list(batch)
        for rewrite, ok in zip(batch, done, strict=True):
            if ok:
                applied(store, rewrite)
            else:
                moved.append(rewrite)
        return moved
    # entry first: the page's entries (one per agent) before any of its rewrites; those
    # not applied (head moved) are voided after, together
    announced = await _announce(store, batch)
    index = {id(rewrite): i for i, rewrite in enumerate(batch)}
    refusals: dict[int, BaseException] = {}
    if not backend.rewrites_many:  # one call per agent (Redis, S3): concurrently

        async def one(rewrite: Rewrite) -> None:
            try:
                await backend.rewrite(rewrite.request)
            except (ConflictError, RewriteBelowPrunedBase) as exc:
                # refused: nothing of it written — but by S3 part-way (``maybe_applied``:
                # some of its records rewritten, each valid, the head's last): planned
                # again all the same (the retry finishes it), its entry voided naming
                # that refusal (a void: "nothing, or not all of it, done"), and the
                # cached state dropped (folded again from what stands). Was: said to
                # write nothing, voided as a plain conflict
                moved.append(rewrite)
                refusals[id(rewrite)] = exc
                if getattr(exc, "maybe_applied", False):
                    _forget(store, rewrite.request.agent_id)
            else:
                applied(store, rewrite)

        # (an error here leaves the entries of rewrites not made unvoided: which ones
        # were made cannot be told, so `audit verify` tells, as unapplied)
        await each(batch, PAGE_CONCURRENCY, one)
    else:
        try:
            done = await backend.rewrite_many([r.request for r in batch])
        except BaseException as exc:  # one commit: nothing of the page was written
            await _void(store, announced, list(range(len(batch))), exc)
            if isinstance(exc, RewriteBelowPrunedBase):
                return list(batch)
            raise
        for rewrite, ok in zip(batch, done, strict=True):
            if ok:
                applied(store, rewrite)
            else:
                moved.append(rewrite)
    if moved:
        conflict = ConflictError(moved[0].request.agent_id, moved[0].request.expected_seq, -1)
        kinds: dict[type[BaseException], tuple[BaseException, list[int]]] = {}
        for rewrite in moved:  # (each voided naming its refusal: one append per kind)
            why = refusals.get(id(rewrite), conflict)
            kinds.setdefault(type(why), (why, []))[1].append(index[id(rewrite)])
        for why, indexes in kinds.values():
            await _void(store, announced, sorted(indexes), why)
    return moved


def _forget(store: StateStore, agent_id: str) -> None:
    """Drop this process's cached state of ``agent_id`` (a rewrite may partly stand)."""
    reads = getattr(store, "_reads", None)
    if reads is not None:
        reads.forget(agent_id)


def applied(store: StateStore, rewrite: Rewrite) -> None:
    """After ``rewrite`` was applied: see :func:`apply`."""
    agent_id = rewrite.request.agent_id
    reads = getattr(store, "_reads", None)
    if reads is not None:
        reads.forget(agent_id)
    witness = getattr(store, "_witness", None)
    if witness is not None:
        witness.acked(agent_id, rewrite.request.expected_seq, rewrite.link)
