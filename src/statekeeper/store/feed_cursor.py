"""``FeedCursor``: where a subscription of a sharded store resumes — one feed position
per shard.

A sharded store (Redis with ``shards=N > 1``, what a Redis Cluster uses) keeps one
change feed per shard, each with its own positions (see
:mod:`statekeeper.backends.redis.feed`): no script can take a store-wide position from
a counter in another hash slot atomically with the append. A subscription follows all
the shards, so its resume point is one position per shard. The cursor is a value: a
tuple of N non-negative ints, compared and hashed as such, with a stable string form
(``str(cursor)``, e.g. ``"fc2:<feed id>:12.0.5.7"``) that :meth:`FeedCursor.parse`
reads back — store it anywhere a string goes, pass either form to
``store.subscribe(from_position=)``.

On a store with one feed a cursor has one position; ``subscribe`` there also takes the
plain int, as it always did.

**A cursor names its feed.** A store's feed has an id (:data:`FEED_ID_FORM`, kept by
the engine: a restart keeps it; a restore, an import into a new store or a re-created
store gets a fresh one, since their events are numbered anew). A subscription's cursor
carries it (``"fc2:<feed id>:12.0.5.7"``), and a cursor of another feed is refused with
:class:`~statekeeper.errors.FeedChanged` instead of resuming at other events. A
position without an id — an int, a ``"fc1:"`` string of an older version, a
``FeedCursor`` built by hand — is taken as this store's, as before (it cannot be told
apart: see ``docs/feed.md``).

**A cursor names the events it passed.** A failover to a replica that missed the
newest commits (asynchronous replication: PostgreSQL, Redis) keeps the feed's id but
hands the lost positions out again, to other events: a subscriber resuming past them
skipped those events without a word. A subscription's cursor also carries, per shard,
a mark of the last event it passed (:func:`event_mark`: agent id, seq and time, 32
bits; ``"fc3:<feed id>:<marks>:<positions>"``), and a resume whose position now holds
another event is refused with :class:`~statekeeper.errors.FeedRewound` (a
``FeedChanged``). A position that holds no event any more (its agent deleted, a gap)
cannot be checked and passes.

Retention works in the same terms: ``store.feed_cursor_bounds()`` gives the floor and
the head of every shard as two cursors (:class:`FeedBounds`), and
``store.trim_feed(cursor)`` trims each shard through its position in the cursor — a
subscriber's ``cursor``, the :meth:`FeedCursor.earliest` of several consumers' cursors,
or one shard's position alone (``FeedCursor.start(n).advanced(k, p)``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import FeedChanged, FeedCursorMismatch, InvalidArgument

__all__ = [
    "FEED_ID_FORM",
    "MAX_COUNT",
    "FeedBounds",
    "FeedCursor",
    "as_cursor",
    "check_count",
    "check_feed",
    "event_mark",
]

_POSITIONS = r"(0|[1-9][0-9]{0,18})(\.(0|[1-9][0-9]{0,18})){0,4095}"
_FORM = re.compile(rf"^fc1:{_POSITIONS}$")
#: a feed id: 16 lowercase hex digits (64 random bits)
FEED_ID_FORM = re.compile(r"^[0-9a-f]{16}$")
_FORM2 = re.compile(rf"^fc2:([0-9a-f]{{16}}):{_POSITIONS}$")
_MARKS = r"(-|[0-9a-f]{8})(\.(-|[0-9a-f]{8})){0,4095}"
_FORM3 = re.compile(rf"^fc3:([0-9a-f]{{16}}):({_MARKS}):({_POSITIONS})$")


def event_mark(agent_id: str, seq: int, timestamp: float) -> int:
    """The 32-bit mark of the feed's event of ``agent_id`` at ``seq`` stored at
    ``timestamp``: what a cursor keeps of the last event it passed (a rekey keeps it)."""
    text = f"{agent_id}\0{seq}\0{timestamp!r}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True, order=False)
class FeedCursor:
    """One change-feed position per shard: ``positions[k]`` is the last position of
    shard ``k`` delivered (or passed over). ``FeedCursor.start(n)`` is the beginning.
    ``feed``: the id of the feed the positions belong to (None: not known, taken as
    the store's); cursors compare and hash by their positions alone."""

    positions: tuple[int, ...]
    feed: str | None = field(default=None, compare=False)
    #: per shard, the :func:`event_mark` of the event at its position (None: not known)
    marks: tuple[int | None, ...] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        positions = self.positions
        if not isinstance(positions, tuple) or not positions or len(positions) > 4096:
            raise InvalidArgument(
                "positions", f"a feed cursor is a tuple of 1..4096 ints, not {positions!r:.80}"
            )
        for p in positions:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise InvalidArgument(
                    "positions", f"a feed cursor's positions are ints >= 0, not {p!r:.40}"
                )
        if self.feed is not None and (
            not isinstance(self.feed, str) or not FEED_ID_FORM.match(self.feed)
        ):
            raise InvalidArgument("feed", f"a feed id is 16 hex digits, not {self.feed!r:.40}")
        marks = self.marks
        if marks is not None and (
            not isinstance(marks, tuple)
            or len(marks) != len(positions)
            or any(m is not None and not (isinstance(m, int) and 0 <= m < 2**32) for m in marks)
        ):
            raise InvalidArgument(
                "marks", f"a feed cursor's marks are one 32-bit int or None a shard: {marks!r:.80}"
            )

    @classmethod
    def start(cls, shards: int) -> FeedCursor:
        """The cursor before every event of a store with ``shards`` shards."""
        return cls((0,) * shards)

    @classmethod
    def parse(cls, text: str, argument: str = "from_position") -> FeedCursor:
        """The cursor of its string form (``str(cursor)``); :class:`InvalidArgument`
        naming the problem (and ``argument``) otherwise."""
        if isinstance(text, str) and (three := _FORM3.match(text)):
            marks = tuple(None if m == "-" else int(m, 16) for m in three.group(2).split("."))
            at = tuple(int(p) for p in three.group(6).split("."))
            if len(marks) == len(at):
                return cls(at, three.group(1), marks)
        if isinstance(text, str) and _FORM2.match(text):
            feed, _, positions = text[4:].partition(":")
            return cls(tuple(int(p) for p in positions.split(".")), feed)
        if not isinstance(text, str) or not _FORM.match(text):
            raise InvalidArgument(
                argument,
                f"not a feed cursor (expected 'fc3:', the feed id, ':', the marks, ':' and"
                f" '.'-separated positions, as str(FeedCursor) gives): {text!r:.80}",
            )
        return cls(tuple(int(p) for p in text[4:].split(".")))

    @classmethod
    def earliest(cls, cursors: Iterable[FeedCursor]) -> FeedCursor:
        """The cursor every one of ``cursors`` has passed: per shard, the lowest
        position (what several consumers have all consumed, so what may be trimmed).
        :class:`InvalidArgument` when there is none, or their shard counts differ."""
        found = list(cursors)
        if not found or not all(isinstance(c, FeedCursor) for c in found):
            raise InvalidArgument("cursors", "earliest() takes one or more FeedCursor values")
        shards = found[0].shards
        for c in found:
            if c.shards != shards:
                raise FeedCursorMismatch(c.shards, shards)
        return cls(tuple(min(c.positions[k] for c in found) for k in range(shards)))

    @property
    def shards(self) -> int:
        return len(self.positions)

    @property
    def total(self) -> int:
        """The sum of the positions: grows with every event passed, for progress
        reports only (it is no position: resume from the cursor itself)."""
        return sum(self.positions)

    def advanced(self, shard: int, position: int) -> FeedCursor:
        """This cursor with shard ``shard`` moved to ``position``."""
        out = list(self.positions)
        out[shard] = position
        return FeedCursor(tuple(out), self.feed)

    def on_feed(self, feed: str | None) -> FeedCursor:
        """This cursor's positions (and marks) as a cursor of feed ``feed``."""
        return FeedCursor(self.positions, feed, self.marks)

    def covers(self, shard: int, position: int) -> bool:
        """True when ``position`` of ``shard`` is at or before this cursor (delivered)."""
        return position <= self.positions[shard]

    def __str__(self) -> str:
        if self.feed is not None and self.marks is not None:
            marks = ".".join("-" if m is None else f"{m:08x}" for m in self.marks)
            return f"fc3:{self.feed}:{marks}:" + ".".join(map(str, self.positions))
        if self.feed is not None:
            return f"fc2:{self.feed}:" + ".".join(map(str, self.positions))
        return "fc1:" + ".".join(map(str, self.positions))


def check_feed(cursor: FeedCursor, feed: str | None) -> str | None:
    """``feed`` (the store's feed id; None: the engine keeps none), once ``cursor`` is
    found to belong to it; :class:`~statekeeper.errors.FeedChanged` when it names
    another feed. A cursor without an id, and the start of the feed, pass."""
    if feed is None or cursor.feed is None or cursor.feed == feed or not any(cursor.positions):
        return feed  # (position 0 is the same on every feed)
    raise FeedChanged(cursor.feed, feed)


def as_cursor(value: object, shards: int, argument: str = "from_position") -> FeedCursor:
    """``from_position`` of ``subscribe`` (or ``argument``) as a cursor of a store with
    ``shards`` feeds: an int (0, or a position of a one-feed store), a
    :class:`FeedCursor` or its string."""
    if isinstance(value, FeedCursor):
        cursor = value
    elif isinstance(value, str):
        cursor = FeedCursor.parse(value, argument)
    elif isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InvalidArgument(argument, f"{argument} must be >= 0, not {value}")
        if value == 0:
            return FeedCursor.start(shards)
        if shards != 1:
            raise InvalidArgument(
                argument,
                f"this store's feed has {shards} shards: {argument} is a cursor (a"
                f" FeedCursor, e.g. the subscription's, or its string form), not the int"
                f" {value}",
            )
        return FeedCursor((value,))
    else:
        raise InvalidArgument(
            argument,
            f"{argument} is an int, a FeedCursor or its string form, not {value!r:.60}",
        )
    if cursor.shards != shards:
        raise FeedCursorMismatch(cursor.shards, shards)
    return cursor


class FeedBounds(NamedTuple):
    """What the change feed holds, per shard: ``floor.positions[k]`` is the last position
    of shard ``k`` trimmed away (0: none), ``head.positions[k]`` its newest committed
    position. A subscription from a cursor at or above ``floor`` (every shard) can
    resume; one below it gets :class:`~statekeeper.errors.FeedPositionCompacted`."""

    floor: FeedCursor
    head: FeedCursor

    @property
    def retained(self) -> int:
        """How many positions the feed spans (sum over shards of head - floor; gaps
        left by deleted agents count too)."""
        return self.head.total - self.floor.total


#: the largest page a feed read can ask for: every engine counts in 64-bit integers
#: (a larger one failed inside the engine: OverflowError on SQLite, a rejected
#: statement on PostgreSQL and Redis)
MAX_COUNT = 2**63 - 1


def check_count(name: str, value: object) -> None:
    """Refuse a page size (``batch_size``, ``next_batch``'s ``limit``) that is not an
    int from 1 to :data:`MAX_COUNT`, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InvalidArgument(name, f"{name} must be an int from 1 to 2**63-1, not {value!r:.60}")
