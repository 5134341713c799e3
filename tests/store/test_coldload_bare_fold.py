"""Cold load a few events past a snapshot kept by nobody (docs/benchmarks.md, "cold6"):
with no cache, when the events after the head's snapshot are a run of plain appends to
one list (a chat's saves), the caller's :class:`Snapshot` is folded straight onto the
snapshot's parsed data (``ReadPath.bare_fold``), without an ``AgentRecord``. It must be
the same state, field by field, as the record's path and the general fold make, fail on
the same damage, and leave every other run of events to the record's path."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.records import Snapshot
from statekeeper.store import thin
from statekeeper.store.reads import ReadPath
from statekeeper.store.writes import SEEN, Seen

from ._chats import chat_url, delete_event, flip_payload_byte

AT = datetime(2026, 12, 6, 2, 40, tzinfo=UTC)
FIELDS = (
    "agent_id",
    "seq",
    "fsm_state",
    "data",
    "schema_version",
    "created_at",
    "updated_at",
    "state_entered_at",
)


def _no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's path (and the general fold) raise: only a bare answer can load."""

    def no_record(*args: Any, **kw: Any) -> Any:
        raise AssertionError("an AgentRecord was built for a load kept by nobody")

    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(thin, "snapshot_record", no_record)
    monkeypatch.setattr(ReadPath, "fold", no_fold)


def _same(got: Snapshot, want: Snapshot) -> None:
    for name in FIELDS:
        assert getattr(got, name) == getattr(want, name), name
        assert type(getattr(got, name)) is type(getattr(want, name)), name


async def _saved(url: str, n: int, fmt: str = "msgpack", typed: bool = False, **kw: Any) -> None:
    """Agent ``x``: ``n`` saves, a snapshot every 4; from the 3rd save on each save only
    appends one message (one FSM state): plain append events (the JSON format's; the
    msgpack format's events are msgpack, which the record path folds)."""
    async with StateStore(url, snapshot_every=4, format=fmt, witness=False, **kw) as store:
        for i in range(1, n + 1):
            data: dict[str, Any] = {"title": "t", "msgs": [f"m{j} " * 9 for j in range(i)]}
            if typed:
                data["at"] = AT
            await store.save("x", data, fsm_state="a" if i < 3 else "b")


async def _want(url: str, n: int, **kw: Any) -> tuple[Snapshot, Snapshot]:
    """The record path's answer (a cache keeps the record) and the general fold's."""
    async with StateStore(url, cache_size=8, witness=False, **kw) as cached:
        return await cached.load("x"), await cached.load("x", at_seq=n)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("n", [9, 10, 11])  # 1, 2, 3 appends past the snapshot at 8
async def test_appends_past_a_whole_snapshot_fold_bare_to_the_record_paths_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, typed: bool, n: int
) -> None:
    url = chat_url(tmp_path, "fold.db")
    await _saved(url, n, fmt, typed)
    want, general = await _want(url, n)
    _same(want, general)
    assert want.seq == n and want.fsm_state == "b"
    assert len(want.data["msgs"]) == n and want.state_entered_at < want.updated_at
    with monkeypatch.context() as patched:
        if fmt == "json":
            _no_record(patched)
        async with StateStore(url, cache_size=0, witness=False) as cold:
            got = await cold.load("x")
            again = await cold.load("x")
            assert cold._reads.loads == 2
    _same(got, want)
    _same(again, want)
    assert got.data is not again.data and got.data["msgs"] is not again.data["msgs"]
    if typed:
        assert type(got.data["at"]) is datetime and got.data["at"] == AT


async def test_appends_past_a_tail_snapshot_fold_bare_at_every_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "tails.db")
    folded: list[bool] = []  # per bare fold: was its snapshot a tail
    bare_fold = ReadPath.bare_fold

    def counted(self: ReadPath, *args: Any) -> Any:
        got = bare_fold(self, *args)
        if got is not None:
            folded.append("base" in args[4])  # (the snapshot's body)
        return got

    monkeypatch.setattr(ReadPath, "bare_fold", counted)
    msgs = [f"{j:04d}" + "lorem ipsum " * 25 for j in range(120)]  # (tails: ~300 chars)
    async with StateStore(url, snapshot_every=100, witness=False) as store:
        for i in range(1, 121):
            await store.save("x", {"msgs": msgs[:i]}, fsm_state="s")
            if i < 100:
                continue
            async with StateStore(url, cache_size=8, witness=False) as cached:
                want = await cached.load("x")
            async with StateStore(url, cache_size=0, witness=False) as cold:
                _same(await cold.load("x"), want)
    assert any(folded) and not all(folded)  # past tails and past whole ones, both bare


async def test_other_events_keyed_records_a_cache_or_a_durable_agent_take_the_record_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "other.db")
    await _saved(url, 10)
    async with StateStore(url, witness=False) as store:  # an FSM move: not an append
        await store.save("x", {"title": "t", "msgs": ["m"]}, fsm_state="c")
    want, general = await _want(url, 11)
    _same(want, general)
    assert want.fsm_state == "c" and want.state_entered_at == want.updated_at
    async with StateStore(url, cache_size=0, witness=False) as cold:
        _same(await cold.load("x"), want)
    with monkeypatch.context() as patched:
        _no_record(patched)
        async with StateStore(url, cache_size=0, witness=False) as cold:
            with pytest.raises(AssertionError, match="AgentRecord"):
                await cold.load("x")  # (the event after the snapshot moves the FSM)

    keyed_url = chat_url(tmp_path, "keyed.db")
    key = {"keyring": Keyring({"k1": bytes(range(32))})}
    await _saved(keyed_url, 10, **key)
    want, general = await _want(keyed_url, 10, **key)
    _same(want, general)
    async with StateStore(keyed_url, cache_size=0, witness=False, **key) as cold:
        _same(await cold.load("x"), want)

    plain_url = chat_url(tmp_path, "plain.db")
    await _saved(plain_url, 10)
    async with StateStore(plain_url, cache_size=0, witness=False) as cold:
        want = await cold.load("x")
        seen = Seen(0, None)
        token = SEEN.set(seen)
        try:
            _same(await cold.load("x"), want)  # the record's path: its link is told
        finally:
            SEEN.reset(token)
        assert seen.adopted is not None and len(seen.adopted) == 32
    with monkeypatch.context() as patched:
        _no_record(patched)
        async with StateStore(plain_url, cache_size=8, witness=False) as cached:
            with pytest.raises(AssertionError, match="AgentRecord"):
                await cached.load("x")


def _edit(db: Path, sql: str, *args: Any) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(sql, args)
        conn.commit()


@pytest.mark.parametrize("damage", ["byte", "gap", "type", "tag", "time"])
async def test_damage_past_the_snapshot_is_refused_as_the_record_path_refuses_it(
    tmp_path: Path, damage: str
) -> None:
    url = chat_url(tmp_path, "bad.db")
    db = tmp_path / "bad.db"
    await _saved(url, 11)  # the snapshot at 8, appends 9..11
    if damage == "byte":
        flip_payload_byte(db, 10)
    elif damage == "gap":
        delete_event(db, 10, drop_trigger=True)
    elif damage == "type":
        _edit(db, "UPDATE sk_events SET kind = 'transition' WHERE seq = 10")
    elif damage == "time":
        _edit(db, "UPDATE sk_events SET ts = ts + 1 WHERE seq = 11")
    else:
        tag = bytes(_edit_tag(db))
        _edit(db, "UPDATE sk_agents SET head_tag = ?", tag[:-1] + bytes([tag[-1] ^ 1]))
    for cache in (0, 8):  # the bare fold's answer and the record path's: both refuse
        async with StateStore(url, cache_size=cache, witness=False) as cold:
            with pytest.raises(IntegrityError):
                await cold.load("x")


def _edit_tag(db: Path) -> bytes:
    with closing(sqlite3.connect(db)) as conn:
        return bytes(conn.execute("SELECT head_tag FROM sk_agents").fetchone()[0])
