"""What a projection is: a handler from feed events to a read model in SQLite.

A projection owns some tables of the read-model database. The runner
(:class:`~statekeeper.feed.runner.ProjectionRunner`) gives its :meth:`Projection.apply`
each event in feed order, inside a transaction that also moves the projection's
position: the read model and the position commit together or not at all, so after any
crash every event is applied exactly once. ``apply`` must only write through the
connection it is given (anything else it does — an HTTP call, a file — is repeated
when a batch is rolled back and run again: make it idempotent).
"""

from __future__ import annotations

import abc
import re
import sqlite3
from typing import ClassVar

from ..errors import InvalidArgument, ProjectionError
from ..records import FeedEvent, Snapshot
from ..store.feed_deletes import AGENT_DELETED

__all__ = ["Projection", "check_projection_name", "with_deletes"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def check_projection_name(name: object) -> str:
    """A projection name: lower-case letters, digits and ``_``, starting with a letter
    (it names tables and appears on the command line)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(
            "name",
            f"a projection name is lower-case letters, digits and '_' (starting with a "
            f"letter, at most 63), not {name!r}",
        )
    return name


def with_deletes(event_types: frozenset[str] | None) -> frozenset[str] | None:
    """The event types a projection of ``event_types`` subscribes to: the tombstones
    of deleted agents too (:data:`~statekeeper.store.feed_deletes.AGENT_DELETED`)."""
    return None if event_types is None else event_types | {AGENT_DELETED}


class Projection(abc.ABC):
    """Subclass it, name it, list its tables, create them in :meth:`setup` and fill
    them in :meth:`apply`.

    >>> class Sizes(Projection):
    ...     name = "sizes"
    ...     tables = ("sizes",)
    ...     def setup(self, db):
    ...         db.execute("CREATE TABLE IF NOT EXISTS sizes (agent_id TEXT PRIMARY KEY, n INT)")
    ...     def apply(self, db, change):
    ...         db.execute(
    ...             "INSERT INTO sizes VALUES (?, 1)"
    ...             " ON CONFLICT (agent_id) DO UPDATE SET n = n + 1",
    ...             (change.agent_id,),
    ...         )
    """

    #: the projection's name (see :func:`check_projection_name`)
    name: ClassVar[str]
    #: the tables it owns: emptied by :meth:`reset` (a rebuild)
    tables: ClassVar[tuple[str, ...]] = ()
    #: only these event types are given to :meth:`apply` (None: every event); the
    #: position still moves past the others
    event_types: ClassVar[frozenset[str] | None] = None

    @abc.abstractmethod
    def setup(self, db: sqlite3.Connection) -> None:
        """Create the projection's tables and indexes (idempotent: ``IF NOT EXISTS``)."""

    @abc.abstractmethod
    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        """Apply one event to the read model, through ``db`` only."""

    def deleted(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        """The agent ``change.agent_id`` was deleted or forgotten (``change.deleted``; a
        tombstone of the feed, whatever :attr:`event_types` says): drop, through ``db``,
        what the read model derived from its events, so the live read model stays what a
        rebuild gives (which never sees them) and a forgotten agent's data is gone from it
        too. The default does nothing: a projection keeping rows per agent overrides it."""
        return None

    def seed(self, db: sqlite3.Connection, state: Snapshot) -> None:
        """Optional: put into the read model, through ``db``, what it holds for the
        agent ``state.agent_id`` once every event up to ``state.seq`` was applied —
        from its current state alone. A projection that implements it can be rebuilt
        after the feed was trimmed (retention): from every agent's current state, then
        the feed from its floor on, each agent's events past its state only
        (:meth:`~statekeeper.feed.ProjectionRunner.rebuild`). One that counts or sums
        events (what the states do not keep) cannot, and does not implement it: called
        on one, this says so (:meth:`seeds` tells beforehand)."""
        raise ProjectionError(
            f"projection {self.name!r} cannot be seeded from an agent's state: it does not"
            " implement Projection.seed (it is made from events the states do not keep)"
        )

    @classmethod
    def seeds(cls) -> bool:
        """Whether the projection implements :meth:`seed`."""
        return cls.seed is not Projection.seed

    def reset(self, db: sqlite3.Connection) -> None:
        """Empty the read model (before a rebuild from position 0)."""
        for table in self.tables:
            db.execute(f'DELETE FROM "{table}"')
