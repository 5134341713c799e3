"""The feed cursors a read-model file records, read without opening a runner: which
projections a retention run leaves behind (``statekeeper retention apply``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..backends.sqlite.files import connect_read_only
from ..errors import InvalidArgument
from ..store.feed_cursor import FeedCursor, as_cursor

__all__ = ["projection_cursors"]


def projection_cursors(
    path: str | Path, shards: int, *, feed: str | None = None, store: str | None = None
) -> dict[str, FeedCursor]:
    """Each projection of the read-model file ``path`` (its ``sk_projections`` rows)
    and the feed cursor it resumes from; ``{}`` when the file does not exist or holds
    no projections. Nothing is written (the file is opened read-only). Given the
    store's ``feed`` id and ``store`` mark (:func:`.feedcheck.store_mark`), a
    projection recording another store and another feed is left out: another store's
    (``x.db2`` beside ``x.db`` share one default file; :func:`.feedcheck.check_file`)."""
    if not Path(path).exists():
        return {}
    conn = connect_read_only(path, timeout=5.0)
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sk_projections)")}
        if not columns:
            return {}
        cursor = "cursor" if "cursor" in columns else "NULL"
        owner = "feed, store" if {"feed", "store"} <= columns else "NULL, NULL"
        rows = conn.execute(
            f"SELECT name, position, {cursor}, {owner} FROM sk_projections"
        ).fetchall()
    except sqlite3.DatabaseError:
        return {}
    finally:
        conn.close()
    out: dict[str, FeedCursor] = {}
    for name, position, stored, its_feed, its_store in rows:
        known = None not in (feed, store, its_feed, its_store)
        if known and its_feed != feed and its_store != store:
            continue
        try:
            if shards == 1:
                out[str(name)] = FeedCursor((int(position or 0),))
            else:
                out[str(name)] = (
                    FeedCursor.start(shards) if stored is None else as_cursor(str(stored), shards)
                )
        except InvalidArgument:  # (another store's cursor: not one to judge here)
            continue
    return out
