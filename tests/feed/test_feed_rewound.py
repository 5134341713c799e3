"""A feed that went back under its subscribers: the store's file replaced by an older
copy of itself (as a failover to a replica that missed the newest commits does to a
server's feed). The feed keeps its id and hands the lost positions out again; a
subscriber whose cursor had passed them resumed past the events stored there, without
a word. Its cursor names the last event it passed: the resume is refused with
``FeedRewound`` (tests/backends/test_postgres_failover_feed.py does it with a real
PostgreSQL failover)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedChanged, FeedRewound
from statekeeper.feed import FeedCursor


async def test_a_cursor_past_positions_the_store_lost_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    url = f"sqlite:///{db}"
    async with StateStore(url, witness=False) as store:
        for i in range(3):
            await store.save(f"kept-{i}", {"i": i})
    shutil.copy(db, tmp_path / "older.db")
    async with StateStore(url, witness=False) as store:
        for i in range(5):
            await store.save(f"lost-{i}", {"i": i})
        sub = store.subscribe(stop_at_head=True)
        assert len([c async for c in sub]) == 8
        cursor = str(sub.cursor)
    shutil.copy(tmp_path / "older.db", db)  # the store goes back to position 3
    async with StateStore(url, witness=False) as store:
        for i in range(6):
            await store.save(f"new-{i}", {"i": i})
        with pytest.raises(FeedRewound) as raised:
            # before: new-5 only; new-0..new-4, stored at positions 4..8, skipped
            [c async for c in store.subscribe(from_position=cursor, stop_at_head=True)]
        assert isinstance(raised.value, FeedChanged) and raised.value.position == 8
        # a cursor at a position the store still holds as it was resumes exactly
        sub = store.subscribe(stop_at_head=True)
        first = [await anext(sub) for _ in range(3)]
        assert [c.agent_id for c in first] == ["kept-0", "kept-1", "kept-2"]
        again = [
            c.agent_id
            async for c in store.subscribe(from_position=str(sub.cursor), stop_at_head=True)
        ]
        assert again == [f"new-{i}" for i in range(6)]


def test_the_cursor_string_keeps_its_marks_and_older_forms_still_parse() -> None:
    cursor = FeedCursor((63, 0), "0123456789abcdef", (0x0D18DD9D, None))
    assert str(cursor) == "fc3:0123456789abcdef:0d18dd9d.-:63.0"
    back = FeedCursor.parse(str(cursor))
    assert back == cursor and back.marks == cursor.marks and back.feed == cursor.feed
    assert back.on_feed("fedcba9876543210").marks == cursor.marks
    older = FeedCursor.parse("fc2:0123456789abcdef:63.0")
    assert older.marks is None and older.positions == (63, 0)
