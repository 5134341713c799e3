"""``verify`` of the feed's tombstone streams (:mod:`.feed_deletes`): the whole store's
:meth:`~statekeeper.store.StateStore.verify` checks each (one per store, per shard, or
per namespace under row-level security) as it checks an agent's stream.

Before, nothing checked them (verify passes over statekeeper's own streams): a
tombstone record that did not open (damaged, altered, sealed under a key the keyring
no longer holds), one out of its chain, or one that is no tombstone (a forged one
naming an agent outside its namespace's stream) produced no problem, while every
consumer of the feed failed on it (or a rebuilt read model kept the agent it
deleted). Each is now a :class:`~statekeeper.store.verification.Problem` of kind
``"feed"`` naming the stream and the record's seq.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..codec import ZERO_LINK
from ..errors import IntegrityError, SerializationError
from ..records import FeedRecord
from .feed_deletes import is_tombstone_stream, tombstone_event
from .verification import Problem, raw_events

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["tombstone_problems"]


async def tombstone_problems(store: StateStore) -> list[Problem]:
    """One problem (kind ``"feed"``) per damaged place of every tombstone stream the
    store holds (that this connection may read)."""
    from .feed_intents import sealed_streams

    problems: list[Problem] = []
    for stream in await sealed_streams(store.backend):
        if is_tombstone_stream(stream):
            problems.extend(await _stream_problems(store, stream))
    return problems


def _why(exc: Exception) -> str:
    return exc.reason if isinstance(exc, IntegrityError) else str(exc)


def _problem(stream: str, seq: int, why: str) -> Problem:
    return Problem(stream, seq, f"a feed tombstone stream's record: {why}", "feed")


async def _stream_problems(store: StateStore, stream: str) -> list[Problem]:
    problems: list[Problem] = []
    head, head_tag = await store.backend.head_tag(stream)
    last: int | None = None
    link: bytes | None = None  # the link the next record must chain to (None: unknown)
    async for raw in raw_events(store, stream):
        if last is None:
            link = ZERO_LINK if raw.seq == 1 else None  # (a trimmed start: unknown)
        elif raw.seq != last + 1:
            problems.append(_problem(stream, last + 1, f"gap: next stored seq is {raw.seq}"))
            link = None
        last = raw.seq
        try:
            body, opened = store._reads.open_event(stream, raw)
        except (IntegrityError, SerializationError) as exc:
            problems.append(_problem(stream, raw.seq, _why(exc)))
            link = None
            continue
        if opened.prev is not None and link is not None and opened.prev != link:
            problems.append(_problem(stream, raw.seq, "it does not chain to the one before"))
        link = opened.link
        try:
            tombstone_event(FeedRecord(0, stream, raw), body, 0)  # (one the feed delivers)
        except IntegrityError as exc:
            problems.append(_problem(stream, raw.seq, _why(exc)))
    if (last or 0) != head:
        problems.append(
            _problem(stream, (last or 0) + 1, f"the stream ends at {last}, head {head}")
        )
    elif head and link is not None:
        try:
            store.codec.check_head(stream, head, link, head_tag)
        except IntegrityError as exc:
            problems.append(_problem(stream, head, exc.reason))
    return problems
