"""Cold load at a whole snapshot kept by nobody (docs/benchmarks.md, "cold5"): with no
cache, a load whose head is a whole snapshot hands the caller a :class:`Snapshot` made
straight from the verified body (``ReadPath.bare_copy``), without an ``AgentRecord``
and without a coroutine for the read. It must be the same state, with the same fields,
as the record's path makes, fail on the same damage, and still tell a DurableAgent's
load the state's link."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.store import thin
from statekeeper.store.reads import ReadPath
from statekeeper.store.writes import SEEN, Seen

from ._chats import chat_url

AT = datetime(2026, 12, 5, 23, 59, tzinfo=UTC)


def _no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's path (and the general fold) raise: only the bare copy can answer."""

    def no_record(*args: Any, **kw: Any) -> Any:
        raise AssertionError("an AgentRecord was built for a load kept by nobody")

    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(thin, "snapshot_record", no_record)
    monkeypatch.setattr(ReadPath, "fold", no_fold)


async def _saved(url: str, fmt: str, typed: bool) -> None:
    async with StateStore(url, snapshot_every=4, format=fmt, witness=False) as store:
        for i in range(1, 9):  # snapshots at 4 and 8: the head is a whole snapshot
            data: dict[str, Any] = {"n": i, "msgs": [f"m{j}" for j in range(i)]}
            if typed:
                data["at"] = AT
            state = "b" if i >= 6 else "a"
            await store.save("x", data, fsm_state=state, schema_version=3)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("typed", [False, True])
async def test_a_bare_load_is_the_state_the_record_path_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, typed: bool
) -> None:
    url = chat_url(tmp_path, "bare.db")
    await _saved(url, fmt, typed)
    async with StateStore(url, cache_size=8, witness=False) as cached:
        want = await cached.load("x")  # the record's path (kept by the cache)
        general = await cached.load("x", at_seq=8)  # the general fold
    assert want == general and want.seq == 8 and want.fsm_state == "b"
    assert want.schema_version == 3 and want.state_entered_at > 0
    with monkeypatch.context() as patched:
        _no_record(patched)
        async with StateStore(url, cache_size=0, witness=False) as cold:
            got = await cold.load("x")
            again = await cold.load("x")
            assert cold._reads.loads == 2
    assert got == want and again == want and got.data is not again.data
    assert got.state_entered_at == want.state_entered_at
    assert got.created_at == want.created_at and got.updated_at == want.updated_at
    if typed:
        assert type(got.data["at"]) is datetime and got.data["at"] == AT


async def test_a_cache_or_a_durable_agent_keeps_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "bare.db")
    await _saved(url, "msgpack", False)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        want = await cold.load("x")
        seen = Seen(0, None)
        token = SEEN.set(seen)
        try:
            assert await cold.load("x") == want  # the record's path: its link is told
        finally:
            SEEN.reset(token)
        assert seen.adopted is not None and len(seen.adopted) == 32
    with monkeypatch.context() as patched:
        _no_record(patched)
        async with StateStore(url, cache_size=8, witness=False) as cached:
            with pytest.raises(AssertionError, match="AgentRecord"):
                await cached.load("x")


async def test_a_damaged_head_snapshot_or_tag_is_caught_on_the_bare_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "bare.db")
    await _saved(url, "msgpack", False)
    db = tmp_path / "bare.db"
    with closing(sqlite3.connect(db)) as conn:
        tag = conn.execute("SELECT head_tag FROM sk_agents").fetchone()[0]
        conn.execute("UPDATE sk_agents SET head_tag = ?", (tag[:-1] + bytes([tag[-1] ^ 1]),))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError):
            await cold.load("x")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE sk_agents SET head_tag = ?", (tag,))
        payload = conn.execute("SELECT payload FROM sk_snapshots WHERE seq = 8").fetchone()[0]
        bad = payload[:-3] + bytes([payload[-3] ^ 1]) + payload[-2:]
        conn.execute("UPDATE sk_snapshots SET payload = ? WHERE seq = 8", (bad,))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("x")  # the snapshot refused: from the one at 4 and 4 events
        assert loaded.seq == 8 and loaded.data["n"] == 8
        report = await cold.verify(["x"])
    assert not report.ok


async def test_a_tail_snapshot_at_the_head_loads_bare_as_the_record_path_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "tails.db")
    made: list[bool] = []  # per bare copy: was the head a tail snapshot
    bare_copy = ReadPath.bare_copy

    def counted(self: ReadPath, agent_id: str, head: int, *args: Any) -> Any:
        made.append("base" in args[2])
        return bare_copy(self, agent_id, head, *args)

    monkeypatch.setattr(ReadPath, "bare_copy", counted)
    msgs = [f"{j:04d}" + "lorem ipsum " * 25 for j in range(120)]  # (tails: ~300 chars)
    async with StateStore(url, snapshot_every=100, witness=False) as store:
        for i in range(1, 121):
            await store.save("x", {"msgs": msgs[:i]}, fsm_state=f"s{i % 3}")
            if i < 99:
                continue
            async with StateStore(url, cache_size=8, witness=False) as cached:
                want = await cached.load("x")
            async with StateStore(url, cache_size=0, witness=False) as cold:
                assert await cold.load("x") == want
    assert any(made) and not all(made)  # tails and whole ones at the head, both bare
