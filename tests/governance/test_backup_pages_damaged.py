"""A page backup of a store whose change feed's b-tree is damaged is refused with a
typed error (:class:`~statekeeper.errors.IntegrityError`, naming the file), never a
bare ``sqlite3.DatabaseError`` or an ``IndexError``: a leaf the plan's outline listed
unread that reads as an interior page (its chunk's check), or a tree the outline
refuses whose ``dbstat`` listing names pages past the file's end (the leftmost leaf
made an interior page: its "children" are any bytes)."""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.errors import IntegrityError
from statekeeper.governance.backup import BackupKey, backup

from ._point_in_time import keyring


async def _damaged(db: Path, leftmost: bool) -> int:
    """A store whose change feed is two levels deep, one of its leaves' type byte
    made a table interior page's (0x05): the leftmost (``leftmost``) or the last."""
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(800):
            await src.save(f"a{i:04d}", {"i": i})
    return _break_leaf(db, leftmost)


def _break_leaf(db: Path, leftmost: bool) -> int:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        order = "path" if leftmost else "pageno DESC"
        (leaf,) = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'sk_feed' AND pagetype = 'leaf'"
            f" ORDER BY {order} LIMIT 1"
        ).fetchone()
    raw = bytearray(db.read_bytes())
    raw[(leaf - 1) * size] = 0x05
    db.write_bytes(raw)
    return int(leaf)


@pytest.mark.parametrize("outline", [True, False], ids=["outline", "whole-walk"])
@pytest.mark.parametrize("leftmost", [True, False], ids=["leftmost-leaf", "last-leaf"])
async def test_a_damaged_change_feed_refuses_the_backup_with_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outline: bool, leftmost: bool
) -> None:
    db = tmp_path / "s.db"
    leaf = await _damaged(db, leftmost)
    if not outline:  # (a module built before tree_outline)
        monkeypatch.setattr(sqlite_pages, "tree_outline", None)
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        if outline and not leftmost:  # the listed leaf's chunk refuses it
            with pytest.raises(IntegrityError, match=re.escape(f"{db}: page {leaf} of a dropped")):
                await backup(src, tmp_path / "b.skb", BackupKey(os.urandom(32)))
            return
        try:  # (a damaged tree dbstat still reads whole is shipped: its pages zeros)
            await backup(src, tmp_path / "b.skb", BackupKey(os.urandom(32)))
        except IntegrityError as exc:
            assert str(db) in str(exc)
