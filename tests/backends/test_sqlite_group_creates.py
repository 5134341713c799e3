"""The SQLite commit queue's shared commit of new streams (``durability="group"``): the
first appends of N agents arriving together are written by the batch's two
``executemany`` (every head, every event row), each keeping its own outcome; and a
batched save finds the running event loop without ``asyncio.get_running_loop`` (one
``getpid`` system call each in CPython 3.11)."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import ConflictError, StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import AppendRequest, AppendResult, EventType, RawEvent

AGENTS = [f"agent-{i:02d}" for i in range(16)]


def _create(agent_id: str, payload: bytes | None = None) -> AppendRequest:
    body = payload if payload is not None else f"{agent_id} created ".encode() * 20
    return AppendRequest(
        agent_id,
        0,
        [RawEvent(1, EventType.CREATED, 1.5, body, hashlib.sha256(body).digest())],
        head_tag=hashlib.sha256(agent_id.encode()).digest()[:16],
    )


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


async def test_new_streams_arriving_together_are_created_by_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "creates.db"
    backend = SQLiteBackend(path)
    one_by_one = _count_calls(monkeypatch, SQLiteBackend, "_append_one")
    try:
        results = await asyncio.gather(*(backend.append(_create(a)) for a in AGENTS))
        assert backend.append_commits == 1  # one shared commit
        assert results == [AppendResult(a, 1, 1) for a in AGENTS]
        assert one_by_one[0] == 0  # no request written on its own
        with closing(sqlite3.connect(path)) as conn:
            heads = conn.execute("SELECT agent_id, head_seq, head_tag FROM sk_agents").fetchall()
            rows = conn.execute("SELECT agent_id, seq, kind, payload FROM sk_events").fetchall()
        assert sorted(heads) == [(a, 1, hashlib.sha256(a.encode()).digest()[:16]) for a in AGENTS]
        assert sorted(rows) == [
            (a, 1, EventType.CREATED, f"{a} created ".encode() * 20) for a in AGENTS
        ]
        # the feed's trigger ran for every row, as for a create written on its own
        assert [f.agent_id for f in await backend.read_feed(0, 100)] == AGENTS
    finally:
        await backend.close()


async def test_a_create_of_a_stream_already_there_fails_alone_in_the_batch(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(tmp_path / "creates.db")
    taken = AGENTS[5]
    try:
        await backend.append(_create(taken, b"first"))
        commits = backend.append_commits
        results = await asyncio.gather(
            *(backend.append(_create(a)) for a in AGENTS), return_exceptions=True
        )
        assert backend.append_commits == commits + 1  # still one shared commit
        refused = results[AGENTS.index(taken)]
        assert isinstance(refused, ConflictError)
        assert (refused.agent_id, refused.expected_seq, refused.current_seq) == (taken, 0, 1)
        assert [r for a, r in zip(AGENTS, results, strict=True) if a != taken] == [
            AppendResult(a, 1, 1) for a in AGENTS if a != taken
        ]
        (kept,) = await backend.read(taken, 0)
        assert kept.payload == b"first"  # the stream already there is untouched
        assert [await backend.head(a) for a in AGENTS] == [1] * len(AGENTS)
    finally:
        await backend.close()


async def test_two_creates_of_one_stream_in_one_batch_create_it_once(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "creates.db")
    try:
        results = await asyncio.gather(
            backend.append(_create("twin", b"one")),
            *(backend.append(_create(a)) for a in AGENTS[:4]),
            backend.append(_create("twin", b"two")),
            return_exceptions=True,
        )
        assert results[0] == AppendResult("twin", 1, 1)
        assert isinstance(results[-1], ConflictError) and results[-1].current_seq == 1
        assert results[1:-1] == [AppendResult(a, 1, 1) for a in AGENTS[:4]]
        (stored,) = await backend.read("twin", 0)
        assert stored.payload == b"one"
    finally:
        await backend.close()


async def test_group_store_first_saves_of_new_and_existing_agents_share_a_commit(
    tmp_path: Path,
) -> None:
    # an agent another store created behind this one's back: its first save here is
    # a create refused in the batch, then made on the stored state (nothing lost)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    async with StateStore(url, durability="group") as store:
        async with StateStore(url) as other:
            await other.save(AGENTS[3], {"n": 0, "by": "other"})
        results = await asyncio.gather(*(store.save(a, {"n": 1}) for a in AGENTS))
        assert [r.last_seq for r in results] == [2 if a == AGENTS[3] else 1 for a in AGENTS]
    async with StateStore(url) as reader:
        states = [(await reader.load(a)).data for a in AGENTS]
        history = [e.seq async for e in reader.history(AGENTS[3])]
    assert states == [{"n": 1}] * len(AGENTS)
    assert history == [1, 2]


async def test_a_batched_save_does_not_ask_asyncio_for_the_running_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}?synchronous=OFF"
    async with StateStore(url, durability="group", witness=False) as store:
        for n in range(3):  # warm: every agent created and cached
            await asyncio.gather(*(store.save(a, {"n": n}) for a in AGENTS))
        asked = _count_calls(monkeypatch, asyncio, "get_running_loop")
        for n in range(3, 13):
            await asyncio.gather(*(store.save(a, {"n": n}) for a in AGENTS))
        monkeypatch.undo()
        assert store.stats().commits > 0
    # 160 batched saves: none asks (each ask is a getpid system call in CPython 3.11)
    assert asked[0] == 0
