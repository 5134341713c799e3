"""Backups, retention, history, the change feed and its projections.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from statekeeper.errors import base as _base
from statekeeper.errors import storage as _storage
from statekeeper.errors.base import ConfigurationError
from statekeeper.errors.opening import StoreLost
from statekeeper.errors.storage import BackendError

# assigned from their module, not imported by name: Python 3.11 compiles a method call
# on an imported name (``StatekeeperError.__init__(self, ...)``) as an attribute load
# and a plain call, on a name the module assigns as a method call; the constructors
# keep the bytecode they had before errors.py was split (issue 11)
InvalidArgument = _base.InvalidArgument
StatekeeperError = _base.StatekeeperError
StorageError = _storage.StorageError


class BackupError(StatekeeperError):
    """A backup cannot be written or restored. Nothing was restored."""


class RestoredPartWay(BackupError):
    """``restore(..., skip_existing=True)`` found agents a restore stopped part-way left
    in the target (the backup's stream up to the end of an earlier part of the chain:
    older than the backup). Skipping them as "already held" would leave them older with
    a report of success, so nothing was restored.

    ``agents`` maps each such agent (as the target lists it) to ``(held, head)``: the
    seq the target holds and the backup's head. Delete them first, or restore into a
    fresh target."""

    def __init__(self, agents: dict[str, tuple[int, int]]) -> None:
        self.agents = dict(agents)
        listed = sorted(self.agents)
        first = listed[0] if listed else ""
        held, head = self.agents[first] if listed else (0, 0)
        shown = ", ".join(repr(a) for a in listed[1:4])
        more = len(listed) - 4
        others = (f"; also {shown}" if shown else "") + (f" and {more:,} more" if more > 0 else "")
        super().__init__(
            f"the target store holds {len(listed):,} agent(s) restored part-way ({first!r}"
            f" up to seq {held} of the backup's {head}: a restore stopped there{others}):"
            " skipping would leave them older than the backup; delete them first, or restore"
            " into a fresh target (nothing was restored)"
        )


class BackupCorrupt(BackupError):
    """A backup file is damaged, truncated, edited or incomplete (``what`` names the part:
    ``"header"``, ``"chunk 3"``, ``"manifest"``, ``"agent 'x'"``...). Nothing was restored."""

    def __init__(self, path: str, what: str, reason: str) -> None:
        self.path = path
        self.what = what
        self.reason = reason
        super().__init__(f"backup {path}: {what}: {reason}")


class BackupKeyMismatch(BackupError):
    """The backup key given is not the one the backup was written with (or it is the
    store's own key, which a backup must not use). Nothing was read or restored."""


class RetentionPolicyError(ConfigurationError):
    """A retention policy is malformed; ``line`` is the line of the policy file (None
    when the policy was built in Python)."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}: " if source and line else (f"{source}: " if source else "")
        super().__init__(where + message)


class HistoryCompacted(StorageError):
    """The state asked for lies before the agent's retention base: retention kept the
    last events and compacted the ones up to ``base_seq`` into a snapshot, so seqs
    ``<= base_seq`` (except the base itself) cannot be rebuilt any more."""

    def __init__(self, agent_id: str, base_seq: int) -> None:
        self.agent_id = agent_id
        self.base_seq = base_seq
        super().__init__(
            f"agent {agent_id!r}: history before seq {base_seq + 1} was compacted by"
            f" retention (its base is the snapshot at seq {base_seq})"
        )


class FeedPositionCompacted(StorageError):
    """A change-feed subscriber asked to resume after ``position``, but the feed no
    longer holds the positions up to ``floor`` (they were trimmed: see
    ``StateStore.trim_feed``). Events between the two cannot be delivered in feed
    order any more: rebuild the consumer's state from the agents' current snapshots
    (``statekeeper projections rebuild NAME`` for a projection) and subscribe again
    from ``floor``.
    """

    def __init__(self, position: int, floor: int, *, shard: int | None = None) -> None:
        self.position = position
        self.floor = floor
        #: on a sharded store, the shard whose feed was trimmed (its positions are meant)
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        super().__init__(
            f"change feed position {position}{where} was compacted away (the feed starts "
            f"after position {floor}): rebuild the read model from a snapshot of the "
            f"agents' current state and subscribe again from position {floor}"
        )


class FeedLost(StoreLost):
    """Part of the change feed's stored data is gone while the store's identity marker
    stays (Redis: the feed's counter or stream key evicted by an ``allkeys-*`` policy,
    or deleted). ``what`` says which: ``"counter"`` (the last position handed out, gone
    with the stream that would restore it: new positions would repeat ones subscribers
    already hold) or ``"entries"`` (positions ``after + 1`` .. ``through`` are no longer
    in the stream, though never trimmed: a subscriber would skip their events without
    a word). ``recovery`` says how to go on; ``shard`` names the shard on a sharded
    store. Nothing was written by the operation that raised it (see ``docs/feed.md``).
    """

    def __init__(
        self,
        location: str,
        what: str,
        detail: str,
        recovery: str,
        *,
        after: int = 0,
        through: int = 0,
        shard: int | None = None,
    ) -> None:
        self.location = location
        self.what = what
        self.reason = detail
        self.recovery = recovery
        self.after = after
        self.through = through
        self.shard = shard
        where = location if shard is None else f"{location} (shard {shard})"
        StorageError.__init__(
            self, f"the change feed of {where} lost its {what}: {detail}; {recovery}"
        )


class FeedNotReplicated(BackendError):
    """A change-feed read found entries after ``position`` that the master holds but
    fewer than ``replicas`` replicas confirmed (``acknowledged`` of them) within
    ``timeout`` seconds (Redis opened with ``wait_replicas=N``, ``wait_timeout``).
    They are held back, not a gap: a failover could still lose them, and a subscriber
    handed one could then see its position given to another event. Nothing was
    delivered past ``position``; read again later (a live subscription waits and
    retries by itself; a ``stop_at_head`` catch-up raises this rather than end short).
    """

    def __init__(
        self,
        position: int,
        replicas: int,
        acknowledged: int,
        timeout: float,
        *,
        shard: int | None = None,
    ) -> None:
        self.position = position
        #: how many replicas were asked to confirm (``wait_replicas``)
        self.replicas = replicas
        #: how many did within ``timeout``
        self.acknowledged = acknowledged
        self.timeout = timeout
        #: on a sharded store, the shard whose feed was read (its positions are meant)
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        super().__init__(
            f"change feed entries after position {position}{where} are held back, not"
            f" missing: {acknowledged} of {replicas} replicas confirmed them within"
            f" {timeout:g}s (wait_timeout), and a failover could still lose them; read"
            " again later"
        )


class ProjectionError(StatekeeperError):
    """Base class for projection errors (:mod:`statekeeper.feed`)."""


class UnknownProjection(ProjectionError, ConfigurationError):
    """No projection of that name is registered with the runner; ``known`` lists the
    registered ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no projection named {name!r} (registered: {', '.join(known) or 'none'})")


class ReadModelOfAnotherStore(ProjectionError, ConfigurationError):
    """The default read-model file ``path`` (``x.projections.db`` beside a SQLite store
    ``x.<suffix>``) holds projection ``name`` of another store: both the store it
    follows (a SQLite file by its absolute path) and that store's change feed differ
    from this one's. Two stores beside each other (``x.db`` and ``x.db2``, or
    ``x.sqlite``) share that file: their ``projections status``, ``run`` or ``rebuild``
    reported, refused or emptied the other store's read models. Nothing was changed;
    give each store its own file (``--read-model FILE``)."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        super().__init__(
            f"{path} holds the read models of another store (projection {name!r} follows"
            " another file and another change feed): give this store its own read-model"
            " file (--read-model FILE)"
        )


class ProjectionNeedsHistory(ProjectionError, FeedPositionCompacted):
    """Projection ``name`` cannot be rebuilt: the change feed was trimmed through
    position ``floor`` (of ``shard``, on a sharded store) by retention or
    ``trim_feed``, and the projection is made from events — counts, sums, moves —
    that the agents' current states do not hold (it does not implement
    :meth:`statekeeper.feed.Projection.seed`), so it cannot start from them either.
    Nothing was changed: its read model and position are as they were. The message
    says what can be done instead."""

    def __init__(self, name: str, floor: int, *, shard: int | None = None) -> None:
        self.name = name
        self.position = 0
        self.floor = floor
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        StatekeeperError.__init__(
            self,
            f"projection {name!r} cannot be rebuilt: the change feed was trimmed through "
            f"position {floor}{where} (retention or trim_feed), and {name!r} counts events"
            " that are gone and that the agents' current states do not hold. Instead:"
            f" keep its read model as it is (`statekeeper projections run {name}` goes on"
            " from its position); or rebuild it from the events still in the feed only"
            f" (`statekeeper projections rebuild {name} --since-floor`, "
            f"runner.rebuild({name!r}, since_floor=True): it then counts from position"
            f" {floor} on); or restore a backup taken before the trim into another store"
            " and rebuild it there",
        )


class ProjectionRebuildOutpaced(ProjectionError, FeedPositionCompacted):
    """Projection ``name``'s rebuild started over ``attempts`` times and each time the
    change feed's floor was raised past it before it finished (retention, or
    ``trim_feed``, running beside it: through position ``floor`` of ``shard`` last).
    Its read model is left being rebuilt (the next rebuild starts over); nothing stored
    was changed."""

    def __init__(self, name: str, attempts: int, floor: int, *, shard: int | None = None) -> None:
        self.name = name
        self.attempts = attempts
        self.position = 0
        self.floor = floor
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        StatekeeperError.__init__(
            self,
            f"projection {name!r} could not be rebuilt: {attempts} times the change feed's"
            f" floor was raised past the rebuild before it finished (last through position"
            f" {floor}{where}: retention or trim_feed running beside it, faster than the"
            f" rebuild). Run `statekeeper projections rebuild {name}` again when retention"
            " runs less often (or not at all) for a while",
        )


class ProjectionFailed(ProjectionError):
    """A projection's handler raised on the event at ``position``: the projection is
    stopped (the store and other projections carry on), its read model and position
    are unchanged (the failed batch was rolled back), and the error is recorded for
    ``statekeeper projections status``. Fix the handler, then run it again: it resumes
    at the failed event."""

    def __init__(self, name: str, position: int, agent_id: str, seq: int, error: str) -> None:
        self.name = name
        self.position = position
        self.agent_id = agent_id
        self.seq = seq
        self.error = error
        super().__init__(
            f"projection {name!r} stopped at feed position {position} "
            f"({agent_id!r} seq {seq}): {error}"
        )


class FeedCursorMismatch(InvalidArgument):
    """A cursor made for another layout: its number of shards is not the store's.
    An agent's shard depends on the number of shards, so a cursor cannot be carried
    over; nothing was read."""

    def __init__(self, cursor_shards: int, store_shards: int) -> None:
        self.cursor_shards = cursor_shards
        self.store_shards = store_shards
        super().__init__(
            "from_position",
            f"the feed cursor has {cursor_shards} shard position(s) but this store's feed"
            f" has {store_shards} shard(s): it was taken on a store with another layout",
        )


class FeedChanged(InvalidArgument):
    """A feed cursor (or a projection's stored position) taken on another feed: the
    feed id it carries (``cursor_feed``) is not this store's (``store_feed``). A
    restore, an import into a new store or a re-created store numbers the events
    anew, so the cursor's positions name other events here: resuming from it would
    skip some and deliver others twice. Nothing was read. Rebuild what was derived
    from the events (``statekeeper projections rebuild NAME``; ``since_floor=True`` on
    a trimmed feed) and subscribe again from position 0 (or the feed's floor) of this
    store."""

    def __init__(
        self,
        cursor_feed: str,
        store_feed: str,
        *,
        what: str = "the feed cursor",
        remedy: str = "Rebuild what you derived from the events (statekeeper projections"
        " rebuild NAME) and subscribe again from position 0 of this store (or its floor:"
        " since_floor)",
    ) -> None:
        self.cursor_feed = cursor_feed
        self.store_feed = store_feed
        super().__init__(
            "from_position",
            f"{what} was taken on feed {cursor_feed}, but this store's feed is {store_feed}"
            " (a restore, an import into a new store or a re-created store numbers the"
            f" events anew: its positions name other events here). {remedy}",
        )


class FeedRewound(FeedChanged):
    """A feed cursor whose position now holds another event than the one it passed:
    the store's feed went back and handed the position out again (a failover to a
    replica that missed the newest commits, a server restored under its clients). The
    events stored since at the positions up to the cursor's were never delivered to
    it: resuming would skip them. ``position`` (of ``shard``, on a sharded store) is
    where it was found; nothing was read. Rebuild what was derived from the events, as
    for :class:`FeedChanged`."""

    def __init__(self, feed: str, position: int, shard: int | None = None) -> None:
        self.cursor_feed = feed
        self.store_feed = feed
        self.position = position
        self.shard = shard
        where = f" of shard {shard}" if shard is not None else ""
        InvalidArgument.__init__(
            self,
            "from_position",
            f"the feed cursor passed an event at position {position}{where} that this store"
            " no longer holds: another event is stored there now (the store went back, as"
            " in a failover to a replica that missed the newest commits, and gave the"
            " position out again), and the events stored since up to the cursor were never"
            " delivered to it. Rebuild what you derived from the events (statekeeper"
            " projections rebuild NAME) and subscribe again from position 0 of this store"
            " (or its floor: since_floor)",
        )
