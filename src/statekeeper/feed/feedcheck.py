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

It records the store too, as a digest of its identity (a SQLite file by its absolute
path, else its URL without a password: :func:`~statekeeper.backends.identity.store_identity`).
Two stores beside each other (``x.db`` and ``x.db2``, ``x.sqlite``) share the CLI's
default read-model file, ``x.projections.db``: :func:`check_file` refuses it
(:class:`~statekeeper.errors.ReadModelOfAnotherStore`) when a projection there records
another store *and* another feed — a store restored in place keeps its identity, one
moved or reached by another URL keeps its feed: both are taken as the same store.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from typing import Any

from ..backends.identity import store_identity
from ..backends.sqlite.files import connect_read_only
from ..errors import FeedChanged, ReadModelOfAnotherStore

__all__ = ["add_column", "check_file", "claim", "store_mark", "stored_feed"]


def store_mark(backend: Any) -> str | None:
    """The digest of ``backend``'s store identity recorded in a read-model file (no
    path, host or URL written to it); None for a store of one process (memory)."""
    identity = store_identity(backend)
    if identity is None:
        return None
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def add_column(db: sqlite3.Connection, columns: set[str]) -> None:
    """Add the ``feed`` and ``store`` columns to a file made before them (NULL: not
    known)."""
    if "feed" not in columns:
        db.execute("ALTER TABLE sk_projections ADD COLUMN feed TEXT")
    if "store" not in columns:
        db.execute("ALTER TABLE sk_projections ADD COLUMN store TEXT")


def check_file(path: str, feed: str | None, store: str | None) -> None:
    """:class:`ReadModelOfAnotherStore` when a projection of the read-model file
    ``path`` records another store and another feed than ``store`` (:func:`store_mark`)
    and ``feed`` (the store's id); nothing is written (opened read-only)."""
    if store is None or feed is None or not os.path.exists(path):
        return
    conn = connect_read_only(path, timeout=5.0)
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sk_projections)")}
        if not {"feed", "store"} <= columns:
            return  # (written before stores were recorded: nothing to tell)
        rows = conn.execute(
            "SELECT name FROM sk_projections WHERE feed IS NOT NULL AND store IS NOT NULL"
            " AND feed <> ? AND store <> ? ORDER BY name LIMIT 1",
            (feed, store),
        ).fetchall()
    except sqlite3.DatabaseError:
        return  # (not a read-model file: its opening says so)
    finally:
        conn.close()
    if rows:
        raise ReadModelOfAnotherStore(str(rows[0][0]), path)


def stored_feed(db: sqlite3.Connection, name: str) -> str | None:
    row = db.execute("SELECT feed FROM sk_projections WHERE name = ?", (name,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def claim(db: sqlite3.Connection, name: str, feed: str | None, store: str | None) -> None:
    """Check (and record) that projection ``name`` follows feed ``feed`` (the store's
    id; None: its engine keeps none) of the store ``store`` (:func:`store_mark`), as
    the module says; one transaction."""
    if feed is None:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT feed, position, cursor, store FROM sk_projections WHERE name = ?", (name,)
        ).fetchone()
        stored, position, cursor, recorded = row
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
        if stored != feed or (store is not None and recorded != store):
            db.execute(
                "UPDATE sk_projections SET feed = ?, store = coalesce(?, store) WHERE name = ?",
                (feed, store, name),
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
