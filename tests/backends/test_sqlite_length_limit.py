"""A record over SQLite's length limit (``SQLITE_LIMIT_LENGTH``: 1,000,000,000 bytes
unless a connection lowers it) is refused with
:class:`~statekeeper.errors.StateTooLarge` naming the limit, nothing written, the file
and the agent as they were. Before, SQLite's ``DataError`` ("string or blob too big")
was taken for a damaged file: an ``IntegrityError`` "database file ... is unreadable",
a sound store reported as corrupt. The limit is lowered on the backend's connections
here (as ``sqlite3_limit`` allows), so the test writes a few MB, not a GB."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import IntegrityError, StateTooLarge
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot, RewriteRequest

LIMIT = 1_000_000


@pytest.fixture
def lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    connect = SQLiteBackend._connect

    def limited(self: SQLiteBackend) -> sqlite3.Connection:
        conn = connect(self)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
        return conn

    monkeypatch.setattr(SQLiteBackend, "_connect", limited)


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_record_over_the_length_limit_is_refused_typed_and_nothing_is_lost(
    tmp_path: Path, lowered: None, durability: str
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url, durability=durability) as store:  # type: ignore[arg-type]
        agent = await store.agent("big")
        agent.data["small"] = "x" * 1000
        await agent.save()
        head = agent.seq
        agent.data["blob"] = "y" * (2 * LIMIT)
        with pytest.raises(StateTooLarge) as refused:
            await agent.save()
        assert not isinstance(refused.value, IntegrityError)
        assert refused.value.limit == LIMIT
        assert refused.value.engine == "SQLite SQLITE_LIMIT_LENGTH"
        assert "SQLITE_LIMIT_LENGTH" in str(refused.value)
        assert "unreadable" not in str(refused.value)
        # the agent named (was "a write: record is over ...")
        assert refused.value.agent_id == "big"
        assert str(refused.value).startswith("agent 'big': record is over")
        assert await store.backend.head("big") == head  # nothing written
        del agent.data["blob"]
        agent.data["after"] = 1
        await agent.save()  # the store goes on
    async with StateStore(url) as store:
        loaded = await store.load("big")
        assert loaded.seq == head + 1
        assert loaded.data == {"small": "x" * 1000, "after": 1}
        assert (await store.verify()).ok


def test_the_sync_store_raises_the_same(tmp_path: Path, lowered: None) -> None:
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        with pytest.raises(StateTooLarge, match=r"agent 'big': .*LENGTH limit of 1,000,000"):
            store.save("big", {"blob": "z" * (2 * LIMIT)})
        store.save("big", {"blob": "small"})
        assert store.load("big").data == {"blob": "small"}


def _big(seq: int, size: int = 2 * LIMIT) -> RawEvent:
    return RawEvent(seq, "patch", float(seq), b"p" * size, b"c")


async def test_each_write_names_the_agent_whose_record_is_too_large(
    tmp_path: Path, lowered: None
) -> None:
    """A batch of several agents names the one whose record is over the limit; a
    snapshot, a rewrite name theirs (was "a write" for each)."""
    backend = SQLiteBackend(tmp_path / "a.db")
    try:
        await backend.append(AppendRequest("small", 0, (_big(1, 10),)))
        await backend.append(AppendRequest("other", 0, (_big(1, 10),)))
        with pytest.raises(StateTooLarge, match=r"^agent 'huge': record") as refused:
            await backend.append_batch(  # (one transaction: refused whole)
                [
                    AppendRequest("small", 1, (_big(2, 10),)),
                    AppendRequest("huge", 0, (_big(1),)),
                ]
            )
        assert refused.value.agent_id == "huge"
        big_snapshot = RawSnapshot(1, 1.0, b"s" * (2 * LIMIT), b"c")
        with pytest.raises(StateTooLarge, match=r"^agent 'small': record"):
            await backend.save_snapshot("small", big_snapshot)
        head = await backend.head("small")
        rewrite = RewriteRequest("small", head, None, (_big(1),))
        with pytest.raises(StateTooLarge, match=r"^agent 'small': record"):
            await backend.rewrite_many([RewriteRequest("other", 1, None, (_big(1, 5),)), rewrite])
        assert await backend.head("huge") == 0
        assert [len(e.payload) for e in await backend.read("small")][:1] == [10]
    finally:
        await backend.close()
