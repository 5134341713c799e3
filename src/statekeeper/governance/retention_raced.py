"""A compaction that lost a race to a writer or to another retention run: planned again.

Retention plans a ``keep_last`` compaction (or a thinning) on the head the listing
found, and its prune is conditional on that head (``Backend.prune(..., head,
checksum)``): nothing is removed from a stream that changed since. An agent written
between the listing and the prune — routine while agents are active — made the prune
raise :class:`~statekeeper.errors.ConflictError` ("expected head seq ..."), and one
another retention run compacted past the plan meanwhile made its fold raise
:class:`~statekeeper.errors.HistoryCompacted`; both were reported ``failed`` (exit code
1 from ``retention apply``) although nothing was lost, so operators learned to ignore
the failures that matter.

:func:`planned_again` runs the plan, and when it lost such a race (the stored head moved
past the listed one, or the base moved above the plan), plans it once more on the
head stored now; one that loses again is :class:`Raced`, reported ``skipped`` (left to
the next run, nothing removed). An agent written all the time lost both plans on every
run (each plan reads and folds the stream: a write lands meanwhile), so its policy was
never applied, and each run said only "skipped": the second plan's change is therefore
made on the stream grown since (:func:`on_grown`: the record the plan found at its head
still there, the change made again at the head now, a few times), which a writer beats
only by writing between that look and the change each time. A stream deleted and
written again since (the same head, another record) stays what it was: ``skipped`` by
the caller, never re-planned (the listing's agent is gone). Anything else is raised as
it was: ``failed``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

from ..errors import ConflictError, HistoryCompacted, StatekeeperError

if TYPE_CHECKING:
    from ..store import StateStore
    from .hooks import Announced
    from .retention_idle import Seen

__all__ = ["GROWN_TRIES", "Raced", "base_unchanged", "floor_raised", "on_grown", "planned_again"]

T = TypeVar("T")

#: the feed positions the compaction being planned (again) raised the floor through
_RAISED: ContextVar[list[int] | None] = ContextVar("retention_floor_raised", default=None)
#: the plan being made is the second one: its change follows a stream grown since
_GROWN: ContextVar[bool] = ContextVar("retention_grown", default=False)
#: how many times the second plan's change is made again on a stream grown since
GROWN_TRIES = 5


async def on_grown(
    store: StateStore,
    agent_id: str,
    head: int,
    seen: Seen,
    change: Callable[[int, Seen], Awaitable[None]],
    base: int,
) -> None:
    """``change(head, seen)`` (a prune conditional on that head record); in a second plan
    (:func:`planned_again`), when it raised :class:`ConflictError` for a stream written
    since — the record ``seen`` still at ``head`` and the stream's base still ``base``
    (the plan's), so the same stream, only grown — the change made again at the head now
    (its record), up to :data:`GROWN_TRIES` times. The plan stays what it was (its
    target below ``head``: more is kept than planned, never less); a stream deleted or
    made again, or compacted by another run meanwhile (its base moved: was taken for
    growth when the new base was below ``head`` — ``failed``, the plan's snapshot gone
    with the other run's prune, or a compaction to below the base reported ``done``), is
    raised as before."""
    from .retention_idle import check_unchanged, head_seen

    tries = GROWN_TRIES if _GROWN.get() else 0
    while True:
        try:
            return await change(head, seen)
        except ConflictError as exc:
            if not tries or exc.agent_id != agent_id or exc.current_seq <= head:
                raise
            tries -= 1
            try:  # the head now read first, then the record planned on looked for: a
                # stream deleted and made again past it after that look is never taken
                # for the same stream grown (was: its head read after the look, the
                # prune made on the new stream, the old one's state its base)
                now = await store.backend.head(agent_id)
                grown = await head_seen(store, agent_id, now)
                await check_unchanged(store, agent_id, head, seen)  # (the same stream)
                if (await store.backend.stream_bases([agent_id]))[0] != base:  # (as planned)
                    raise exc
            except ConflictError:
                raise exc from None
            head, seen = now, grown


async def base_unchanged(store: StateStore, agent_id: str, base: int) -> None:
    """Raise :class:`HistoryCompacted` (a race lost: planned again) when the stream's base
    is no longer ``base``, the one its plan found: another retention run compacted it
    since, as far as this plan or past it. Was: not looked at, and a run whose plan had
    the same target as the other's made its prune all the same (removing nothing: the
    other had) and reported the other's removal as its own — two concurrent runs each
    said "removed N event(s)" of the same agent. (A compaction between this look and
    the prune still passes: the engines' prune is not conditional on the base.)"""
    (now,) = await store.backend.stream_bases([agent_id])
    if now != base:
        raise HistoryCompacted(agent_id, now)


def floor_raised(position: int) -> None:
    """The change feed's floor was raised through ``position`` for the compaction being
    made: it is trimmed before the prune, so a compaction that then loses its race
    trimmed the feed all the same. Was: its ``skipped`` action said no floor, so
    ``retention apply`` did not say the floor rose nor name the projections behind it
    (their next resume: FeedPositionCompacted, with no word from the run)."""
    noted = _RAISED.get()
    if noted is not None:
        noted.append(position)


class Raced(StatekeeperError):
    """A compaction that lost its race twice (control flow of retention: reported
    ``skipped`` with :attr:`reason`, never raised to a caller)."""

    def __init__(self, reason: str, feed_position: int = 0) -> None:
        self.reason = reason
        #: the feed position its attempts raised the floor through (0: not raised)
        self.feed_position = feed_position
        super().__init__(reason)


async def _lost_race(store: StateStore, agent_id: str, exc: Exception) -> str | None:
    """Why ``exc`` (raised by a compaction) is a race lost to another process, or None
    when it is not one (a real failure)."""
    if isinstance(exc, ConflictError):
        if exc.agent_id != agent_id or exc.current_seq <= exc.expected_seq:
            return None  # (deleted, or made again: the caller's own cases)
        return f"written since it was listed (head {exc.expected_seq}, now {exc.current_seq})"
    if isinstance(exc, HistoryCompacted) and exc.agent_id == agent_id:
        # another run compacted it past the plan: its base is stored now
        (stored,) = await store.backend.stream_bases([agent_id])
        if stored == exc.base_seq:
            return f"compacted by another retention run since it was listed (base {stored})"
    return None


async def planned_again(
    plan: Callable[..., Awaitable[T]],
    announced: list[Announced],
    store: StateStore,
    rule: object,
    agent_id: str,
    head: int,
    *rest: object,
) -> T:
    """``plan(store, rule, agent_id, head, *rest)``; when it lost a race to another
    process, ``plan`` once more on the head stored now (the audit entries the first
    attempt announced voided first); a second race lost raises :class:`Raced` naming
    both."""
    raised: list[int] = []
    token = _RAISED.set(raised)
    try:
        return await _planned_again(plan, announced, raised, store, rule, agent_id, head, *rest)
    finally:
        _RAISED.reset(token)


async def _planned_again(
    plan: Callable[..., Awaitable[T]],
    announced: list[Announced],
    raised: list[int],
    store: StateStore,
    rule: object,
    agent_id: str,
    head: int,
    *rest: object,
) -> T:
    try:
        return await plan(store, rule, agent_id, head, *rest)
    except (ConflictError, HistoryCompacted) as exc:
        why = await _lost_race(store, agent_id, exc)
        if why is None:
            raise
        for made in announced:  # (nothing of that attempt was changed)
            await made.failed(exc)
        announced.clear()
        first = exc
    now = await store.backend.head(agent_id)
    grown = _GROWN.set(True)
    try:
        return await plan(store, rule, agent_id, now, *rest)
    except (ConflictError, HistoryCompacted) as exc:
        again = await _lost_race(store, agent_id, exc)
        if again is None:
            raise
        raise Raced(
            f"{why}; planned again on seq {now}: {again} (left to the next run, nothing removed)",
            max(raised, default=0),
        ) from first
    finally:
        _GROWN.reset(grown)
