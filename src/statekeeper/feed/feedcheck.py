"""Which feed a projection's stored position belongs to.

A read-model file records, per projection, the id of the store's change feed its
position was taken on (the ``feed`` column of ``sk_projections``; see
:mod:`statekeeper.store.feed_cursor`). A restore, an import into a new store or a
re-created store numbers the events anew: a position of the old feed names other events
in the new one, and following from it would skip some and apply others twice. So
before following, the runner compares the stored id with the store's:

* the same, or the store's engine keeps none: follow;
* none stored (a projection never run, or a file written before feed ids existed): the
  store's id is recorded, and the projection follows from its position — a position
  of an older file is taken as this store's, as it always was (it carries nothing to
  tell otherwise: after a restore, rebuild such projections by hand);
* another: :class:`~statekeeper.errors.FeedChanged`, nothing applied, nothing written —
  unless the position is still 0, where every feed starts alike. ``rebuild`` starts
  over on the new feed (and records its id).
"""

from __future__ import annotations

import sqlite3

from ..errors import FeedChanged

__all__ = ["add_column", "claim", "stored_feed"]


def add_column(db: sqlite3.Connection, columns: set[str]) -> None:
    """Add the ``feed`` column to a file made before it (NULL: not known)."""
    if "feed" not in columns:
        db.execute("ALTER TABLE sk_projections ADD COLUMN feed TEXT")


def stored_feed(db: sqlite3.Connection, name: str) -> str | None:
    row = db.execute("SELECT feed FROM sk_projections WHERE name = ?", (name,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def claim(db: sqlite3.Connection, name: str, feed: str | None) -> None:
    """Check (and record) that projection ``name`` follows feed ``feed`` (the store's
    id; None: its engine keeps none), as the module says; one transaction."""
    if feed is None:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT feed, position, cursor FROM sk_projections WHERE name = ?", (name,)
        ).fetchone()
        stored, position, cursor = row
        at_start = not position and (
            cursor is None or not any(int(p) for p in str(cursor).rpartition(":")[2].split("."))
        )
        if stored is not None and stored != feed and not at_start:
            raise FeedChanged(
                str(stored),
                feed,
                what=f"projection {name!r}'s stored position",
                remedy=f"Rebuild it (statekeeper projections rebuild {name};"
                " ProjectionRunner.rebuild): it starts over on this store's feed",
            )
        if stored != feed:
            db.execute("UPDATE sk_projections SET feed = ? WHERE name = ?", (feed, name))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
