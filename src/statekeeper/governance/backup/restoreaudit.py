"""The audit entries of a restore into a store that keeps an audit log: entry first.

A restore's one ``restore`` entry was written after its last write: a restore killed
(SIGKILL) in its writing pass left the streams it wrote with no entry at all (``audit
verify`` then named their events as written without the log), and the rerun that
finished it (``--skip-existing``) recorded a restore of 0 agents. As every mutation
that cannot share a commit with its entry (docs/governance.md, "Durable with the
write"), the restore now announces itself before its first write: a ``restore`` entry
with outcome ``started`` (``detail``: the backups, the agents it writes, ``ahead``),
and, once every write is made, a ``restore`` entry with outcome ``ok`` naming it
(``detail.finishes``, with what was done). A restore that fails part-way voids its
``started`` entry (``error:<Type>``); one killed leaves it open, and ``audit verify``
lists it as not applied until a rerun of the same backups finishes it — the rerun
finds it and writes no second ``started`` entry, only the ``ok`` one: a restore killed
and run again leaves one pair, as one that was never stopped. A rerun that fails
leaves the entry it took over open (the restore is still not finished).

Only the store's own audit log is written ahead; an ``audit`` sink given by the caller
receives one event after the restore, as before (it has no entry to name), and so does
the log of a target that receives the backup's own audit log (an entry written ahead
would take the first seq of the stream the restore writes)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...arguments import AUDIT_STREAM
from ...errors import StatekeeperError
from ..hooks import AuditSink, GovernanceEvent, emit, store_log

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["STARTED", "Begun", "RestoreEntry", "begin", "pending_restores", "restore_entry"]

#: the outcome of the entry a restore writes before its first write
STARTED = "started"


@dataclass(frozen=True, slots=True)
class Begun:
    """A restore's ``started`` entry in the store's audit log (``entry``: its seq;
    ``taken_over``: written by an earlier run, left open)."""

    log: Any
    principal: str | None
    entry: int
    taken_over: bool = False

    async def finished(self, details: dict[str, Any]) -> None:
        await self.log.record(
            "restore",
            principal=self.principal,
            outcome="ok",
            detail={**details, "finishes": self.entry},
        )

    async def failed(self, exc: BaseException) -> None:
        """Void the ``started`` entry (an error: not all was written). A SIGKILL or a
        Ctrl-C leaves it open for the rerun that finishes it; so does an error of a
        rerun that took it over: the restore it records is still not finished (and
        its run may still be going: two restores of one backup at once, the second
        failing on the first's agents, voided the first's entry, which then ended
        "ok" on a voided entry, or, killed, open with nothing listing it)."""
        if isinstance(exc, Exception) and not self.taken_over:
            await self.log.void(
                self.entry, "restore", principal=self.principal, agent_id=None, exc=exc
            )


@dataclass(frozen=True, slots=True)
class RestoreEntry:
    """How a restore records that it is done: its ``started`` entry finished, or (no
    entry written ahead) one event into ``sink`` as before."""

    begun: Begun | None
    sink: AuditSink | None

    async def finished(self, details: dict[str, Any]) -> None:
        if self.begun is not None:
            await self.begun.finished(details)
        else:
            await emit(self.sink, GovernanceEvent("restore", None, "ok", details=details))


@contextlib.asynccontextmanager
async def restore_entry(
    store: StateStore,
    given: AuditSink | None,
    sink: AuditSink | None,
    backups: Sequence[str],
    streams: Iterable[str],
) -> AsyncIterator[RestoreEntry]:
    """Around a restore's writes (of ``streams``: the agents, and the store's own
    streams): its ``started`` entry first (:func:`begin`), voided when they
    fail; then :meth:`RestoreEntry.finished` (``sink``: the restore's audit sink)."""
    streams = list(streams)
    agents = sum(a[:1] != "\x01" for a in streams)
    # (the backup's own log becoming the target's: recorded after it, as before)
    ahead = given is None and AUDIT_STREAM not in streams
    details = {"backups": list(backups), "agents": agents}
    begun = await begin(store, backups, details) if ahead else None
    try:
        yield RestoreEntry(begun, sink)
    except BaseException as exc:
        if begun is not None:
            await begun.failed(exc)
        raise


async def begin(
    store: StateStore,
    backups: Sequence[str],
    details: dict[str, Any],
) -> Begun | None:
    """Announce the restore of ``backups`` in ``store``'s audit log before its first
    write; None when the store keeps no log. A ``started`` entry of the same backups
    left open by a stopped run is taken over instead, whether or not that run wrote
    an agent: one killed before its first agent (carrying the leases or the holds),
    or one whose partly restored agents were deleted before the rerun, is finished
    by a rerun that writes them all (a second ``started`` entry left the first open
    for good: ``audit verify`` said "not finished, run it again" after every rerun).
    The log is read for it (~2 s per 100,000 entries on SQLite)."""
    found = await store_log(store)
    if found is None or not callable(getattr(found[0], "record_ahead", None)):
        return None
    log, principal = found
    if callable(getattr(log, "entries", None)):
        try:
            open_ = await pending_restores(log)
        except StatekeeperError:  # a log this role cannot read (row-level security)
            open_ = {}
        same = [seq for seq, named in open_.items() if named == list(backups)]
        if same:
            return Begun(log, principal, same[-1], taken_over=True)
    entry = await log.record_ahead(
        "restore", principal=principal, agent_id=None, detail=details, outcome=STARTED
    )
    return Begun(log, principal, entry)


async def pending_restores(log: Any) -> dict[int, Any]:
    """The ``started`` restore entries of ``log`` that no entry finished or voided
    (entry seq -> the backups it names), in log order."""
    open_: dict[int, Any] = {}
    async for entry in log.entries(operation="restore"):
        see(open_, entry)
    return open_


def see(open_: dict[int, Any], entry: Any) -> None:
    """Follow one ``restore`` entry into ``open_`` (:func:`pending_restores`)."""
    detail = entry.detail
    if entry.outcome == STARTED and "ahead" in detail:
        open_[entry.seq] = detail.get("backups")
    for key in ("finishes", "voids"):
        if type(detail.get(key)) is int:
            open_.pop(detail[key], None)
