"""Reads: the head and head tag, a stream's events (commits fetched in parallel, each
checked to span its seqs: a commit deleted by something else is an
``IntegrityError``, not a shorter stream) and the seq at a time."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from ...errors import IntegrityError
from ...records import RawEvent
from .engine import S3Engine
from .layout import _BASE_RECORD, _decode_events

__all__ = ["S3Reads"]


class S3Reads(S3Engine):
    """Reads (a part of :class:`~.backend.S3Backend`)."""

    async def head(self, agent_id: str) -> int:
        return await self._run(self._head_sync, agent_id)

    def _head_tag_sync(self, agent_id: str) -> tuple[int, bytes | None]:
        _, meta = self._tip(agent_id)
        if meta is None:
            return 0, None
        tag = meta.get("headtag")
        return int(meta["last"]), bytes.fromhex(tag) if tag else None

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        return await self._run(self._head_tag_sync, agent_id)

    def _commit_events(self, agent_id: str, first: int, tag: str = "") -> list[RawEvent]:
        key = self._agent_root(agent_id) + "e/" + self._seq_name(first)

        def load() -> list[RawEvent]:
            found = self._get(key)
            if found is None:
                raise IntegrityError(agent_id, first, "commit object vanished while reading")
            return [e for e in _decode_events(agent_id, found[0]) if e.type != _BASE_RECORD]

        return self._cached(key, tag, load) if tag else load()

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        self._check_open()
        if (limit is not None and limit <= 0) or (to_seq is not None and to_seq <= after_seq):
            return []
        tagged = await self._run(self._commits_tagged, agent_id)
        wanted: list[tuple[int, str]] = []
        for i, (first, tag) in enumerate(tagged):
            nxt = tagged[i + 1][0] if i + 1 < len(tagged) else None
            if nxt is not None and nxt - 1 <= after_seq:
                continue  # entirely at or before after_seq
            if to_seq is not None and first > to_seq:
                break
            wanted.append((first, tag))
        # a commit ends where the next one begins (a prune copies the part of the commit
        # spanning its base into a commit of its own before it hides the older one)
        ends = {first: nxt - 1 for (first, _), (nxt, _) in itertools.pairwise(tagged)}
        out: list[RawEvent] = []
        for start in range(0, len(wanted), self._wave):  # commits fetched in parallel
            chunk = wanted[start : start + self._wave]
            bodies = await asyncio.gather(
                *(self._run(self._commit_events, agent_id, first, tag) for first, tag in chunk)
            )
            for (first, _), events in zip(chunk, bodies, strict=True):
                end = ends.get(first)
                self._check_spans(agent_id, first, end, events)
                for e in events:
                    if e.seq <= after_seq or (to_seq is not None and e.seq > to_seq):
                        continue
                    if end is not None and e.seq > end:
                        break
                    out.append(e)
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    @staticmethod
    def _check_spans(
        agent_id: str, first: int, end: int | None, events: Sequence[RawEvent]
    ) -> None:
        """Refuse a commit that does not begin at its name or (not the newest) does not
        reach the next one: a commit object deleted by someone else (a lifecycle rule,
        another tool) leaves a gap that read as a shorter stream, events skipped."""
        if events and events[0].seq != first:
            raise IntegrityError(agent_id, first, "S3 commit object holds other seqs")
        reached = events[-1].seq if events else first - 1
        if end is not None and reached < end:
            raise IntegrityError(
                agent_id,
                reached + 1,
                f"events {reached + 1}..{end} are missing: their S3 commit object was "
                "deleted by something other than this store",
            )

    def _seq_at_sync(self, agent_id: str, timestamp: float) -> int:
        tagged = self._commits_tagged(agent_id)
        end: int | None = None
        for first, tag in reversed(tagged):
            events = self._commit_events(agent_id, first, tag)
            best = [
                e.seq for e in events if e.timestamp <= timestamp and (end is None or e.seq <= end)
            ]
            end = first - 1
            if best:
                return max(best)
        return 0

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        return await self._run(self._seq_at_sync, agent_id, timestamp)
