"""Reading the audit log: its entries in order, each authenticated and chained to the
one before it, and a keyed commitment to its head."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..errors import IntegrityError, StatekeeperError
from .audit_chain import _AuditChain
from .audit_records import _PAGE, AUDIT_ID, AuditEntry, AuditHead, _entry, _reason

__all__: list[str] = []


class _AuditReader(_AuditChain):
    """Reading entries (:class:`~statekeeper.governance.audit.AuditLog`)."""

    # -- reading ----------------------------------------------------------------------

    async def entries(
        self,
        *,
        agent: str | None = None,
        principal: str | None = None,
        since: float | None = None,
        operation: str | None = None,
        after_seq: int = 0,
    ) -> AsyncIterator[AuditEntry]:
        """The entries in order, each verified (authenticated and chained to the one
        before it; :class:`~statekeeper.errors.IntegrityError` at the first that is
        not), filtered by agent (an id, or a namespace prefix ending in ``/``),
        principal, time (``since``, seconds since the epoch) and operation."""
        async for entry, _ in self._scan(after_seq, strict=True, problems=None):
            if agent is not None and not (
                entry.agent_id == agent
                or (agent.endswith("/") and (entry.agent_id or "").startswith(agent))
            ):
                continue
            if principal is not None and entry.principal != principal:
                continue
            if since is not None and entry.time < since:
                continue
            if operation is not None and entry.operation != operation:
                continue
            yield entry

    async def _scan(
        self,
        after_seq: int,
        *,
        strict: bool,
        problems: list[str] | None,
        seen: list[int] | None = None,
    ) -> AsyncIterator[tuple[AuditEntry, bytes]]:
        from ..codec.pipeline import ZERO_LINK

        prev: bytes | None = ZERO_LINK if after_seq == 0 else None
        expected = after_seq + 1
        cursor = after_seq
        while True:
            page = await self.backend.read(AUDIT_ID, after_seq=cursor, limit=_PAGE)
            for raw in page:
                cursor = raw.seq
                if seen is not None:
                    seen.append(raw.seq)  # read, whether or not it opens
                if raw.seq != expected:
                    what = f"entries {expected}..{raw.seq - 1} are missing (deleted)"
                    if strict or problems is None:
                        raise IntegrityError(AUDIT_ID, expected, what)
                    problems.append(what)
                    prev = None
                expected = raw.seq + 1
                try:
                    opened = self.codec.open(
                        AUDIT_ID, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                    )
                except StatekeeperError as exc:
                    if strict or problems is None:
                        raise
                    problems.append(f"entry {raw.seq}: {_reason(exc)}")
                    prev = None
                    continue
                if prev is not None and opened.prev != prev:
                    what = (
                        f"entry {raw.seq} does not follow entry {raw.seq - 1} "
                        "(removed or reordered)"
                    )
                    if strict or problems is None:
                        raise IntegrityError(AUDIT_ID, raw.seq, what)
                    problems.append(what)
                prev = opened.link
                yield _entry(raw.seq, raw.timestamp, opened.body), opened.link
            if len(page) < _PAGE:
                return

    async def head(self) -> AuditHead | None:
        """A keyed commitment to the log as it is now (None when it is empty)."""
        seq, link, _ = await self._read_head()
        if seq == 0:
            return None
        key_id, digest = self.codec.witness_digest(AUDIT_ID, seq, link)
        return AuditHead(seq, key_id, digest)
