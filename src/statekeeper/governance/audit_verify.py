"""Verifying the audit log: every entry, the authenticated head, a witness, and the
entries written ahead of their mutation checked against the store."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ..codec import Codec
from ..errors import AccessDenied, StatekeeperError
from .audit_checks import StoreChecks
from .audit_claims import unclaimed_events
from .audit_read import _AuditReader
from .audit_records import (
    AUDIT_ID,
    KEPT_MARKER,
    MISSING,
    AuditEntry,
    AuditHead,
    AuditReport,
    _reason,
)

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__: list[str] = []


class _AuditVerifier(_AuditReader):
    """Verifying the log (:class:`~statekeeper.governance.audit.AuditLog`)."""

    async def check_readable(self) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` when this connection may
        append to the log but not read its entries (PostgreSQL row-level security, a
        tenant's role: ``Backend.reads_audit_log``): through it the log would list as
        empty and verify as truncated. :meth:`verify` and ``statekeeper audit`` check it."""
        with contextlib.suppress(StatekeeperError):  # (a read that fails: verify says so)
            await self.backend.head(AUDIT_ID)  # (opens the engine: the flag is set then)
        if getattr(self.backend, "reads_audit_log", True):
            return
        from urllib.parse import urlsplit

        dsn = str(getattr(self.backend, "dsn", ""))
        role = (urlsplit(dsn).username if "://" in dsn else None) or "(the database role)"
        raise AccessDenied(
            role, "admin", "audit", None,
            "this database role appends to the audit log but may not read its entries"
            " (PostgreSQL row-level security): list and verify it connected as the"
            " schema's owner or as the role of an admin of every namespace",
        )  # fmt: skip

    async def verify(self, witness: AuditHead | None = None) -> AuditReport:
        """Check every entry (authentication, chain, gap-free seqs), the authenticated
        head, and, given the ``witness`` of an earlier head, that the log still holds
        it (else it was rolled back, truncated or rewritten since). A connection that
        may not read the entries is refused (:meth:`check_readable`)."""
        await self.check_readable()
        report = AuditReport()
        ahead = _Ahead()
        checks = StoreChecks(self.codec.keyring.data_keys if self.codec.keyring else None)
        last: tuple[int, bytes] | None = None
        at_witness: bytes | None = None
        seen: list[int] = []
        try:
            async for entry, link in self._scan(
                0, strict=False, problems=report.problems, seen=seen
            ):
                report.entries += 1
                last = (entry.seq, link)
                if entry.operation == "audit" and entry.outcome == MISSING:
                    report.problems.append(
                        f"entry {entry.seq}: the log was found empty when it was written, "
                        "in a store marked as keeping one: the log before it was deleted"
                    )
                ahead.see(entry)
                checks.see(entry)
                if witness is not None and entry.seq == witness.seq:
                    at_witness = link
            seq, tag = await self.backend.head_tag(AUDIT_ID)
        except StatekeeperError as exc:
            report.problems.append(f"the log cannot be read: {_reason(exc)}")
            return report
        end = max(seen, default=0)
        if end == 0 and seq == 0:
            try:
                kept = await self.backend.read_marker(KEPT_MARKER)
            except StatekeeperError as exc:
                report.problems.append(f"the store cannot be read: {_reason(exc)}")
                return report
            if kept:
                report.problems.append(
                    "the log is missing: it has no entry, and the store is marked as "
                    "keeping one (set with its first entry): the log was deleted"
                )
        if last is not None and last[0] != end:
            pass  # the last entry read did not open: already a problem, no head to check
        elif seq != end:
            report.problems.append(
                f"the log's head says {seq} entries but it ends at entry {end} (truncated)"
                if seq > end
                else f"entries after the head ({seq}) were added without it (spliced)"
            )
        elif last is not None:
            try:
                self.codec.check_head(AUDIT_ID, seq, last[1], tag)
            except StatekeeperError as exc:
                report.problems.append(f"the log's head: {_reason(exc)}")
            key_id, digest = self.codec.witness_digest(AUDIT_ID, seq, last[1])
            report.head = AuditHead(seq, key_id, digest)
        try:
            report.unapplied = await ahead.unapplied(self.backend)
            unapplied, problems = await checks.check(self.backend, ahead.skipped)
            report.unapplied.extend(unapplied)
            report.problems.extend(problems)
            report.problems.extend(await unclaimed_events(self.backend, checks))
            report.unchecked = dict(sorted(checks.unchecked.items()))
        except StatekeeperError as exc:
            report.problems.append(f"the store cannot be read: {_reason(exc)}")
        if witness is not None:
            if end < witness.seq:
                report.problems.append(
                    f"rolled back: the witness saw {witness.seq} entries, the log has {end}"
                )
            elif at_witness is None or not self.codec.check_witness_digest(
                AUDIT_ID, witness.seq, at_witness, witness.key_id, witness.digest
            ):
                report.problems.append(
                    f"rewritten: entry {witness.seq} is not the one the witness saw"
                )
        return report


#: operations after which an agent's earlier events may be gone for good
_ERASING = frozenset({"delete", "purge", "forget", "retention", "rekey", "migrate"})


class _Ahead:
    """The entries written ahead of their mutation (``detail["ahead"]``), gathered
    while :meth:`AuditLog.verify` reads the log, then checked against the store."""

    __slots__ = ("compacted", "erased", "pending", "rekeyed", "restores", "skipped")

    def __init__(self) -> None:
        # entry seq -> (agent, seq, checksum, must be there)
        self.pending: dict[int, tuple[str, int, str, bool, str]] = {}
        self.erased: dict[str, int] = {}  # agent -> seq of its last erasing entry
        # agent -> (entry seq, head seq, key) of its last rekey written ahead
        self.rekeyed: dict[str, tuple[int, int, str | None]] = {}
        # (entry seq, agent) of appends erased or rewritten since: for StoreChecks
        self.skipped: list[tuple[int, str]] = []
        # restores started (entry first) that no entry finished or voided: stopped
        self.restores: dict[int, Any] = {}
        # entry seq -> (agent, base) of each compaction recorded made (not voided): the
        # events up to its base are gone, so an append written ahead of one of them
        # cannot be told by reading it (tiered: its saves' entries are written ahead)
        self.compacted: dict[int, tuple[str, int]] = {}

    def see(self, entry: AuditEntry) -> None:
        detail, agent = entry.detail, entry.agent_id
        voided = detail.get("voids")
        if type(voided) is int:
            self.pending.pop(voided, None)
            self.restores.pop(voided, None)
            self.compacted.pop(voided, None)
            if agent is not None and self.rekeyed.get(agent, (0,))[0] == voided:
                del self.rekeyed[agent]
        if entry.operation == "restore":  # (governance/backup/restoreaudit.py)
            if entry.outcome == "started" and "ahead" in detail:
                self.restores[entry.seq] = detail.get("backups")
            if type(detail.get("finishes")) is int:
                self.restores.pop(detail["finishes"], None)
        if agent is None:
            return
        if entry.operation in _ERASING and entry.outcome.startswith(("ok", "done")):
            self.erased[agent] = entry.seq
        if (
            entry.operation == "compact"
            and entry.outcome.startswith(("ok", "done"))
            and type(entry.last_seq) is int
        ):
            self.compacted[entry.seq] = (agent, entry.last_seq)
        mark = detail.get("ahead")
        if entry.operation == "rekey":
            # a later rekey of the agent supersedes an earlier one (its key differs)
            self.rekeyed.pop(agent, None)
            rekey = mark.get("rekey") if isinstance(mark, dict) else None
            if isinstance(rekey, list) and len(rekey) == 2 and type(rekey[0]) is int:
                self.rekeyed[agent] = (entry.seq, rekey[0], rekey[1])
            return
        if isinstance(mark, str) and entry.last_seq is not None:  # an append: it is there
            self.pending[entry.seq] = (agent, entry.last_seq, mark, True, entry.operation)
        elif isinstance(mark, dict) and isinstance(mark.get("gone"), list):  # a delete
            seq, checksum = mark["gone"]
            self.pending[entry.seq] = (agent, seq, checksum, False, entry.operation)

    async def unapplied(self, backend: Backend) -> list[str]:
        out = [
            f"entry {seq}: the restore of {backups!r} it records was not finished (it "
            "stopped part-way: run it again with --skip-existing to finish it)"
            for seq, backups in self.restores.items()
        ]
        for entry_seq, (agent, seq, checksum, there, operation) in sorted(self.pending.items()):
            if there and self.erased.get(agent, 0) > entry_seq:
                self.skipped.append((entry_seq, agent))  # erased since: StoreChecks tells
                continue
            raws = await backend.read(agent, after_seq=seq - 1, to_seq=seq)
            found = bool(raws) and raws[-1].seq == seq and raws[-1].checksum.hex() == checksum
            if there and not raws and self._compacted_since(agent, entry_seq, seq):
                continue  # removed since by a compaction (StoreChecks checks that one)
            if found != there:
                what = "was not written" if there else "was not deleted"
                out.append(
                    f"entry {entry_seq}: the {operation} of {agent!r} at seq {seq} it "
                    f"records {what} (the writer stopped between the entry and the write)"
                )
        for agent, (entry_seq, seq, key) in sorted(self.rekeyed.items(), key=lambda kv: kv[1]):
            if self.erased.get(agent, 0) > entry_seq:
                continue  # deleted, purged, forgotten or migrated since
            raws = await backend.read(agent, after_seq=seq - 1, to_seq=seq)
            if not raws or raws[-1].seq != seq:
                continue  # gone since (compacted, deleted): nothing left to tell by
            header = Codec.header(raws[-1].payload)
            under = header.key_id if header is not None else "(unreadable)"
            if under != key:
                out.append(
                    f"entry {entry_seq}: the rekey of {agent!r} to key {key!r} it records "
                    f"was not applied (the record at seq {seq} is under {under!r}; the "
                    "rekey stopped between the entry and the rewrite: run it again)"
                )
        return out

    def _compacted_since(self, agent: str, entry_seq: int, seq: int) -> bool:
        """Whether a compaction recorded after entry ``entry_seq`` (not voided) removed
        ``agent``'s event at ``seq`` (its base at or above it): nothing is left there
        to compare — as on an engine that commits the append with its entry, where
        nothing is marked ahead, nothing to tell."""
        return any(
            at > entry_seq and who == agent and base >= seq
            for at, (who, base) in self.compacted.items()
        )
