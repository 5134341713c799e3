"""On a store its backend created at open (``Backend.opened_new``: a new SQLite file),
the save of an agent the store never had in its cache is a create made without reading
the head first (docs/benchmarks.md, "savecpu2"); an agent that does exist — another
writer's — is refused by the create's compare-and-set and written again on a read."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = SQLiteBackend.state_rows_now

    def counted(self: SQLiteBackend, agent_id: str) -> Any:
        calls[0] += 1
        return original(self, agent_id)

    monkeypatch.setattr(SQLiteBackend, "state_rows_now", counted)
    return calls


def _kinds(path: Path, agent_id: str) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT seq, kind FROM sk_events WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_new_agents_of_a_new_store_are_created_without_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    reads = _count_reads(monkeypatch)
    path = tmp_path / "new.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability=durability) as store:
        assert store.backend.opened_new
        for i in range(5):
            await store.save(f"a{i}", {"i": i})
            await store.save(f"a{i}", {"i": i, "more": True})
        assert reads[0] == 0
        assert store._writes.retries == 0
    assert _kinds(path, "a3") == [(1, "created"), (2, "patch")]
    async with StateStore(f"sqlite:///{path}") as store:  # an existing file: read first
        assert not store.backend.opened_new
        await store.save("b", {"x": 1})
        assert reads[0] == 1
        assert (await store.load("a3")).data == {"i": 3, "more": True}


async def test_a_stale_cached_head_costs_one_retry(tmp_path: Path) -> None:
    # the stale head drops the record from the cache: the save is made again on a read,
    # not on a create taken for new (which the compare-and-set would refuse once more)
    url = f"sqlite:///{tmp_path}/stale.db?synchronous=OFF"
    async with StateStore(url) as mine, StateStore(url) as theirs:
        assert mine.backend.opened_new
        await mine.save("a", {"messages": ["m0"]})
        await theirs.save("a", {"messages": ["m0", "theirs"]})
        await mine.save("a", {"messages": ["m0", "mine"]})
        assert mine._writes.retries == 1
        assert (await theirs.load("a")).data == {"messages": ["m0", "mine"]}


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_another_writer_s_agent_is_saved_onto_its_stored_state(
    tmp_path: Path, durability: str
) -> None:
    path = tmp_path / "two.db"
    url = f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, durability=durability) as first:
        assert first.backend.opened_new
        async with StateStore(url) as other:
            assert not other.backend.opened_new
            await other.save("x", {"a": 1, "kept": [1, 2]})
        # taken for new (never in first's cache): the create is refused, the head read,
        # the save made on the stored state
        done = await first.save("x", {"a": 2, "kept": [1, 2]})
        assert done.last_seq == 2
        assert first._writes.retries == 1
        assert (await first.load("x")).data == {"a": 2, "kept": [1, 2]}
    assert _kinds(path, "x") == [(1, "created"), (2, "patch")]


async def test_after_a_delete_heads_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _count_reads(monkeypatch)
    path = tmp_path / "deleted.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability="group") as store:
        await store.save("a", {"v": 1})
        assert await store.delete("a")  # (the cache drops "a": agents not cached may exist)
        await store.save("a", {"v": 2})
        await store.save("b", {"v": 3})
        assert reads[0] == 2
        assert (await store.load("a")).data == {"v": 2}
        assert store._writes.retries == 0
    assert _kinds(path, "a") == [(1, "created")]


@pytest.mark.parametrize("cache_size", [0, 2])
async def test_without_every_agent_in_the_cache_heads_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_size: int
) -> None:
    # no cache, or one that evicted an agent: an agent not cached may be stored, so its
    # head is read first (no refused create a save)
    path = tmp_path / f"evict{cache_size}.db"
    async with StateStore(
        f"sqlite:///{path}?synchronous=OFF", durability="group", cache_size=cache_size
    ) as store:
        for rounds in range(2):
            for i in range(3):
                await store.save(f"a{i}", {"i": i, "round": rounds})
        assert store._writes.retries == 0
        for i in range(3):
            assert (await store.load(f"a{i}")).data == {"i": i, "round": 1}
