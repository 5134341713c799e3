"""A stored stream's events read back in order, each verified and checked against
the chain, page by page (:meth:`StateStore.history`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..codec import ZERO_LINK
from ..codec.pipeline import CHAIN_BROKEN
from ..errors import IntegrityError, StatekeeperError
from ..records import Event
from .body import to_event
from .compaction import base_error
from .reads import PAGE, ReadPath

__all__ = ["read_history"]


async def _gap(reads: ReadPath, agent_id: str, cursor: int, seq: int) -> StatekeeperError:
    """What a history read that finds ``seq`` after ``cursor`` raises: the stream
    starts at ``seq`` (retention compacted what was before: ``HistoryCompacted``, as a
    load of that seq raises; deleted by hand: ``IntegrityError``), else a gap in the
    stream (``IntegrityError``)."""
    first = await reads.backend.read(agent_id, 0, None, limit=1)
    if first and first[0].seq == seq:
        return await base_error(reads, agent_id, seq - 1)
    return IntegrityError(agent_id, cursor + 1, f"gap: next stored seq is {seq}")


async def read_history(
    reads: ReadPath, agent_id: str, after_seq: int, to_seq: int | None
) -> AsyncIterator[Event]:
    """The events of ``agent_id`` after ``after_seq`` (up to ``to_seq``), verified
    and checked against the chain, read page by page."""
    cursor = after_seq
    link: bytes | None = ZERO_LINK if after_seq == 0 else None
    checksum = b""  # the last event read's
    while True:
        page = await reads.backend.read(agent_id, cursor, to_seq, limit=PAGE)
        if not page and cursor == after_seq and to_seq is not None and to_seq > after_seq:
            # nothing in a bounded range: one that retention compacted entirely (the
            # stream now starts after it) raises, as a load of those seqs does,
            # rather than reading as an agent without those events
            first = await reads.backend.read(agent_id, 0, None, limit=1)
            if first and first[0].seq > 1 and first[0].seq > to_seq:
                raise await base_error(reads, agent_id, first[0].seq - 1)
        for raw in page:
            if raw.seq != cursor + 1:
                raise await _gap(reads, agent_id, cursor, raw.seq)
            body, opened = reads.open_event(agent_id, raw)
            if link is not None and opened.prev is not None and opened.prev != link:
                raise IntegrityError(agent_id, raw.seq, CHAIN_BROKEN)
            link, checksum = opened.link, raw.checksum
            yield to_event(agent_id, raw, body)
            cursor = raw.seq
        if len(page) < PAGE:
            if cursor > after_seq and (to_seq is None or cursor < to_seq):
                # the stream ended before the range did (a range read whole, as
                # LangGraph's windows are, costs no read more)
                await _check_end(reads, agent_id, cursor, to_seq, link, checksum)
            return


async def _check_end(
    reads: ReadPath,
    agent_id: str,
    last: int,
    to_seq: int | None,
    link: bytes | None,
    checksum: bytes,
) -> None:
    """A read that found no event after ``last`` (of link ``link``, stored checksum
    ``checksum``) before the end of its range checks the stream head, as a load does: the newest
    events deleted and the head moved back (its tag no longer matches), or deleted
    under it, are an ``IntegrityError``, not a shorter history. One read of the head
    (and one more of the stream when the range is not whole)."""
    head, tag = await reads.backend.head_tag(agent_id)
    if head == 0:
        return  # deleted meanwhile
    if last < (head if to_seq is None else min(to_seq, head)):
        # events the head says are stored are not (appended since the page was read,
        # they would be found now)
        if not await reads.backend.read(agent_id, last, None, limit=1):
            raise IntegrityError(agent_id, last + 1, f"stream ends at seq {last}, head is {head}")
    elif last >= head:
        try:
            if last > head:
                raise IntegrityError(
                    agent_id, head + 1, f"events past the head (seq {head}) are stored"
                )
            reads.codec.check_head(agent_id, head, link, tag)
        except IntegrityError:
            again = await reads.backend.read(agent_id, last - 1, last, limit=1)
            if again and again[0].checksum == checksum:  # (not rewritten meanwhile)
                raise
