"""The audit log's hash chain: the cached head, chaining and sealing entries after it,
the one retry loop of every entry write, and reading the authenticated head back
(the state :class:`~statekeeper.governance.audit.AuditLog`'s writers and readers share)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..codec import Codec
from ..errors import (
    AuditLogLocked,
    ConfigurationError,
    ConflictError,
    FeedLocked,
    IntegrityError,
    RetriesExhausted,
)
from ..records import AppendRequest, RawEvent, RawSnapshot
from ..store.governed_checks import LOG_LOCKS
from .audit_records import (
    _KIND,
    _LINK_BODY,
    _LINK_KIND,
    _RETRIES,
    AUDIT_ID,
    KEPT_MARKER,
    MISSING,
    _body,
)

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring

__all__: list[str] = []

_T = TypeVar("_T")


class _AuditChain:
    """The chain state of an audit log (:class:`~statekeeper.governance.audit.AuditLog`)."""

    def __init__(
        self,
        backend: Backend,
        keyring: Keyring,
        *,
        reads: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.codec = Codec(keyring=keyring)
        self.reads = reads
        self.clock = clock
        self._lock = asyncio.Lock()
        # the writes that met the log's head locked (AuditLogLocked), or under row
        # security the feed's lock every write of events takes (FeedLocked): see _turn
        self._locked_out = 0
        self._locked_by: type[AuditLogLocked | FeedLocked] = AuditLogLocked
        # the head this process last wrote or read: (seq, link, tag); None: unknown
        self._head: tuple[int, bytes, bytes | None] | None = None
        # the store is known to carry KEPT_MARKER (set, or the engine keeps no markers)
        self._marked = False

    def __repr__(self) -> str:
        return f"AuditLog({self.backend!r})"

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """This process's turn to write the log (``self._lock``). A write that waited
        for its turn while another met the log's head locked (``AuditLogLocked``: it
        waited ``audit_lock_timeout`` for it; or the change feed's lock, ``FeedLocked``,
        which every write of events waits for under row security, the log's too) fails
        at once, nothing written, rather than wait that long again in its turn: n
        calls queued behind a locked log waited n times the bound before their error
        (was; for the feed's lock until readpriv)."""
        seen = self._locked_out
        async with self._lock:
            if self._locked_out != seen:
                what = "audit log" if self._locked_by is AuditLogLocked else "change feed"
                raise self._locked_by(
                    f"the store's {what} is locked by another transaction: a write of"
                    " this process waited for it longer than audit_lock_timeout while this"
                    " one waited its turn. Nothing was written: write again; the"
                    " transaction holding it (see pg_blocking_pids, pg_locks) is the one"
                    " to end"
                )
            try:
                yield
            except LOG_LOCKS as exc:
                self.locked_out(exc)
                raise

    def locked_out(self, exc: AuditLogLocked | FeedLocked) -> None:
        """A write met the log's lock (``exc``): the writes queued behind it fail at
        once (:meth:`_turn`)."""
        self._locked_out += 1
        self._locked_by = type(exc)

    async def _wrote(self, head: tuple[int, bytes, bytes | None]) -> None:
        """After entries were committed: keep the head, and (once per process) see that
        the store carries :data:`KEPT_MARKER`, set after the log's first commit (a
        crash before it leaves a log unmarked, never a marked store without a log; a
        log written before the marker existed is marked by its next entry)."""
        self._head = head
        if not self._marked:
            if await self.backend.read_marker(KEPT_MARKER) is False:
                await self.backend.set_marker(KEPT_MARKER)
            self._marked = True

    async def _on_the_log(
        self,
        bodies: Sequence[bytes],
        send: Callable[[AppendRequest], Awaitable[_T]],
    ) -> tuple[_T, AppendRequest, tuple[int, bytes, bytes | None]]:
        """Chain the entries ``bodies`` after the log's head and hand their append to
        ``send`` (alone, or in one commit with the change it records). A conflict on
        the log (another writer recorded first) reads the head again and goes again,
        up to ``_RETRIES`` times; any other conflict is the caller's and is raised.
        Returns what ``send`` returned, the append and the head after it (the caller,
        holding ``self._lock``, decides whether the head moved). The one retry loop of
        every single-commit entry write."""
        last: ConflictError | None = None
        for _ in range(_RETRIES):
            request, head = await self._next_entries(bodies)
            try:
                out = await send(request)
            except ConflictError as exc:
                if exc.agent_id != AUDIT_ID:
                    raise
                last = exc
                self._head = None  # another writer recorded: read its head, go again
                continue
            return out, request, head
        assert last is not None
        raise RetriesExhausted(AUDIT_ID, _RETRIES, last)

    async def _next_entries(
        self, bodies: Sequence[bytes]
    ) -> tuple[AppendRequest, tuple[int, bytes, bytes | None]]:
        """The append of the entries ``bodies`` (chained, in order) after the head, and
        the head after them."""
        if self._head is None:
            self._head = await self._read_head()
        base, link, tag = self._head
        seq = base
        events: list[RawEvent] = []
        if base == 0 and await self.backend.read_marker(KEPT_MARKER):
            # an empty log in a store that kept one: it was deleted; say so first
            bodies = [
                _body("audit", None, None, None, None, MISSING, {"found": "empty log"}),
                *bodies,
            ]
        for data in bodies:
            ts = self.clock()
            if not math.isfinite(ts):
                raise ConfigurationError("the audit clock returned a time that is not finite")
            seq += 1
            sealed = self.codec.seal(AUDIT_ID, seq, _KIND, ts, data, link)
            events.append(RawEvent(seq, _KIND, ts, sealed.payload, sealed.checksum))
            link = sealed.link
        new_tag = self.codec.head_tag(AUDIT_ID, seq, link)
        snapshot = None
        if self.backend.audit_links:  # the next writer chains on it, reading no entry
            ts = events[-1].timestamp
            sealed = self.codec.seal(AUDIT_ID, seq, _LINK_KIND, ts, _LINK_BODY, link)
            snapshot = RawSnapshot(seq, ts, sealed.payload, sealed.checksum)
        request = AppendRequest(
            AUDIT_ID,
            base,
            events,
            snapshot=snapshot,
            head_tag=new_tag,
            expected_tag=tag,
            check_tag=self.backend.compares_head_tag,
        )
        return request, (seq, link, new_tag)

    async def _append_entries(self, bodies: Sequence[bytes]) -> int:
        """Append the entries ``bodies`` on their own (retried over other writers'
        entries); the seq of the first."""
        async with self._turn():
            _, _, head = await self._on_the_log(bodies, self.backend.append)
            await self._wrote(head)
            return head[0] - len(bodies) + 1

    async def _read_head(self) -> tuple[int, bytes, bytes | None]:
        """The stored head, authenticated: the last entry's link (from the link the
        append left, ``Backend.audit_links``, else from the entry itself) and its tag
        checked. Under PostgreSQL's row-level security a tenant's role reads no entry:
        only the head's seq, tag and link."""
        from ..codec.pipeline import ZERO_LINK

        while True:
            seq, tag = await self.backend.head_tag(AUDIT_ID)
            if seq == 0:
                return 0, ZERO_LINK, tag
            link = await self._head_link(seq)
            if link is None:
                raws = await self.backend.read(AUDIT_ID, after_seq=seq - 1, to_seq=seq)
                if raws:
                    raw = raws[-1]
                    link = self.codec.open(
                        AUDIT_ID, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                    ).link
                elif self.backend.audit_links and (await self.backend.head_tag(AUDIT_ID))[0] != seq:
                    continue  # another writer moved the head (and its link) meanwhile
                else:
                    raise IntegrityError(AUDIT_ID, seq, "the audit log's head entry is missing")
            self.codec.check_head(AUDIT_ID, seq, link, tag)
            return seq, link, tag

    async def _head_link(self, seq: int) -> bytes | None:
        """The link of entry ``seq`` that its append left (None: none left)."""
        if not self.backend.audit_links:
            return None
        snap = await self.backend.latest_snapshot(AUDIT_ID, at_or_below=seq)
        if snap is None or snap.seq != seq:
            return None
        opened = self.codec.open(
            AUDIT_ID, seq, _LINK_KIND, snap.timestamp, snap.payload, snap.checksum
        )
        return opened.prev
