"""``ProjectionRunner.rebuild`` (:mod:`.runner`): empty a projection and apply the feed
again, converging beside retention.

A rebuild resets the projection at the feed's floor, seeds it from the agents' states
when the feed was trimmed (:mod:`.seeding`), then follows the feed to its head. A
retention run that raised the floor past the rebuild's position meanwhile (while it
seeded, or while it followed) made the rebuild raise
:class:`~statekeeper.errors.FeedPositionCompacted`; run again it worked, but under
retention running continuously it could fail every time. Now the rebuild starts over by
itself from the floor as it is then (the events trimmed past it are in the agents'
states, which it seeds again), at most :data:`ATTEMPTS` times in all; a floor raised
past it every time raises :class:`~statekeeper.errors.ProjectionRebuildOutpaced`
naming why (its read model is left ``rebuilding``/``seeding``: the next ``rebuild``
starts over). A projection that cannot start from the states (no
:meth:`~statekeeper.feed.Projection.seed`) and was not asked ``since_floor`` raises as
before: it cannot start over without the trimmed events.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from ..errors import (
    FeedPositionCompacted,
    InvalidArgument,
    ProjectionNeedsHistory,
    ProjectionRebuildOutpaced,
)
from ..store.feed import store_feed_bounds
from ..store.feed_cursor import FeedCursor
from . import feedcheck
from .rebuild_lock import rebuild_held
from .seeding import seed_all

if TYPE_CHECKING:
    from .projection import Projection
    from .runner import Progress, ProjectionRunner

__all__ = ["ATTEMPTS", "rebuild", "resume_seeding"]

#: how many times in all a rebuild starts (over) before retention outpacing it is an error
ATTEMPTS = 5


async def rebuild(
    runner: ProjectionRunner,
    name: str,
    progress: Progress | None,
    from_states: bool,
    since_floor: bool,
) -> int:
    """:meth:`ProjectionRunner.rebuild <statekeeper.feed.ProjectionRunner.rebuild>`."""
    projection = runner.get(name)
    if from_states and since_floor:
        raise InvalidArgument("since_floor", "give from_states or since_floor, not both")
    if from_states and not projection.seeds():
        raise InvalidArgument(
            "from_states",
            f"projection {name!r} cannot start from the agents' states (it does not"
            " implement Projection.seed)",
        )
    runner.seeded = 0
    async with rebuild_held(runner.path, name):  # (a live runner finishes one killed)
        return await _rebuild(runner, projection, progress, from_states, since_floor)


async def resume_seeding(runner: ProjectionRunner, name: str) -> None:
    """Finish projection ``name``'s rebuild, found ``seeding`` (or ``rebuilding``) with
    no rebuild alive (:mod:`.rebuild_lock`); nothing when another runner finished it
    meanwhile (under the lock, the state is read again)."""
    projection = runner.get(name)
    async with rebuild_held(runner.path, name):
        _, state, _ = await runner._position(name)
        if state in ("seeding", "rebuilding"):
            await _rebuild(runner, projection, None, False, False)


async def _rebuild(
    runner: ProjectionRunner,
    projection: Projection,
    progress: Progress | None,
    from_states: bool,
    since_floor: bool,
) -> int:
    name = projection.name
    stored, state, _ = await runner._position(name)
    if state in ("rebuilding", "seeding"):
        bounds = await store_feed_bounds(runner.store)
        if any(p < floor for p, (floor, _) in zip(stored.positions, bounds, strict=True)):
            # the feed was trimmed past the interrupted rebuild: it cannot resume, so
            # it starts over as below (was: resumed, and raised FeedPositionCompacted
            # at every call, since_floor=True included — the projection stuck)
            state = "trimmed"
    feed = await runner.store.backend.feed_id()
    if (
        state in ("rebuilding", "seeding")
        and feed is not None
        and await runner._in_db(feedcheck.stored_feed, name) not in (None, feed)
    ):
        state = "restored"  # an interrupted rebuild of another feed: start over
    outpaced: FeedPositionCompacted | None = None
    for _ in range(ATTEMPTS):
        if state not in ("rebuilding", "seeding"):
            state = await _start_over(runner, projection, feed, from_states, since_floor)
        try:
            if state == "seeding":
                runner.seeded = await seed_all(runner, projection)
            applied = await runner._follow(projection, stop_at_head=True, progress=progress)
            break
        except FeedPositionCompacted as exc:
            if isinstance(exc, ProjectionNeedsHistory) or not (since_floor or projection.seeds()):
                raise  # (it cannot start over without the events trimmed)
            # retention raised the floor past the rebuild meanwhile: start over from it
            outpaced, state = exc, "trimmed"
    else:
        assert outpaced is not None
        raise ProjectionRebuildOutpaced(
            name, ATTEMPTS, outpaced.floor, shard=outpaced.shard
        ) from outpaced

    def done(db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE sk_projections SET state = 'live', rebuild_target = NULL WHERE name = ?",
            (name,),
        )
        db.execute("DELETE FROM sk_projection_seeds WHERE name = ?", (name,))
        db.execute("COMMIT")

    await runner._in_db(done)
    return int(applied)


async def _start_over(
    runner: ProjectionRunner,
    projection: Projection,
    feed: str | None,
    from_states: bool,
    since_floor: bool,
) -> str:
    """Empty the projection and set it at the feed's start (or its floor): its new state,
    ``rebuilding`` or ``seeding``."""
    name = projection.name
    bounds = await store_feed_bounds(runner.store)
    floors = FeedCursor(tuple(floor for floor, _ in bounds))
    head = sum(h for _, h in bounds)
    trimmed = [(shard, floor) for shard, (floor, _) in enumerate(bounds) if floor > 0]
    start, state = FeedCursor.start(len(bounds)), "rebuilding"
    if since_floor:
        start = floors
    elif trimmed or from_states:
        if not projection.seeds():
            shard, floor = trimmed[0]
            raise ProjectionNeedsHistory(name, floor, shard=shard if len(bounds) > 1 else None)
        start, state = floors, "seeding"

    def reset(db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            projection.reset(db)
            db.execute("DELETE FROM sk_projection_seeds WHERE name = ?", (name,))
            db.execute(
                "UPDATE sk_projections SET position = ?, cursor = ?, applied = 0,"
                " state = ?, rebuild_target = ?, error = NULL,"
                " error_position = NULL, updated_at = ?, feed = ?,"
                " store = coalesce(?, store) WHERE name = ?",
                (
                    start.total,
                    None if start.shards == 1 else str(start),
                    state,
                    head,
                    time.time(),
                    feed,
                    feedcheck.store_mark(runner.store.backend),
                    name,
                ),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    await runner._in_db(reset)
    return state
