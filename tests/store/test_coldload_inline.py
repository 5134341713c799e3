"""Cold load without a coroutine around SQLite's read (``SQLiteReads.state_rows_now``,
docs/benchmarks.md "cold0"), and a stream shorter than the snapshot interval read on the
thin path (``ReadPath.at_snapshot`` from the stream's start, no general fold). Every
record is still verified; what does not fit falls back to the general fold."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import AgentNotFound, IntegrityError, StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import HistoryCompacted, StoreClosed
from statekeeper.store.reads import ReadPath

from ._chats import delete_event, flip_payload_byte

DOCS = [{"task": "t", "messages": [f"message {i}" for i in range(n)]} for n in range(1, 4)]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'inline.db'}?synchronous=OFF"


async def _short(url: str) -> None:
    async with StateStore(url, witness=False) as store:  # 3 events: no snapshot
        for doc in DOCS:
            await store.save("a", doc)


def _no_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(ReadPath, "fold", no_fold)


async def test_a_short_stream_loads_without_the_general_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _short(url)
    _no_fold(monkeypatch)
    expected, seq = DOCS[-1], 3
    for cache_size in (0, 8):
        async with StateStore(url, cache_size=cache_size, witness=False) as cold:
            loaded = await cold.load("a")
            assert loaded.data == expected and loaded.seq == seq
            assert cold._reads.loads == 1
            expected, seq = {**expected, "task": f"t{cache_size}"}, seq + 1
            await cold.save("a", expected)  # a write on the state read
            assert (await cold.load("a")).data == expected


async def test_the_sqlite_read_is_a_plain_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _short(url)

    async def no_coroutine(*args: Any, **kw: Any) -> Any:
        raise AssertionError("read_state_rows was awaited")

    async with StateStore(url, cache_size=0, witness=False) as cold:
        monkeypatch.setattr(cold.backend, "read_state_rows", no_coroutine)
        assert (await cold.load("a")).data == DOCS[-1]
        with pytest.raises(AgentNotFound):
            await cold.load("nobody")


async def test_an_engine_that_overrides_read_state_rows_is_called(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _short(url)
    calls: list[str] = []

    class Counting(SQLiteBackend):
        async def read_state_rows(self, agent_id: str) -> Any:
            calls.append(agent_id)
            return await super().read_state_rows(agent_id)

    backend = Counting(str(tmp_path / "inline.db"))
    async with StateStore(backend, cache_size=0, witness=False) as cold:
        assert (await cold.load("a")).data == DOCS[-1]
    assert calls == ["a"]


async def _cold_load_fails(url: str, raised: type[Exception] | tuple[type[Exception], ...]) -> None:
    """A cold load (no cache) of the edited stream raises ``raised``."""
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(raised):
            await cold.load("a")


async def test_a_tampered_event_of_a_short_stream_still_fails(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _short(url)
    flip_payload_byte(tmp_path / "inline.db", 2)
    await _cold_load_fails(url, IntegrityError)


async def test_a_short_stream_with_its_head_tag_forged_still_fails(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _short(url)
    with closing(sqlite3.connect(tmp_path / "inline.db")) as conn:
        tag = conn.execute("SELECT head_tag FROM sk_agents").fetchone()[0]
        conn.execute("UPDATE sk_agents SET head_tag = ?", (tag[:-1] + bytes([tag[-1] ^ 1]),))
        conn.commit()
    await _cold_load_fails(url, IntegrityError)


async def test_a_short_stream_missing_its_first_event_says_so(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _short(url)
    delete_event(tmp_path / "inline.db", 1)
    await _cold_load_fails(url, (HistoryCompacted, IntegrityError))


async def test_a_short_stream_cut_before_its_head_fails(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _short(url)
    delete_event(tmp_path / "inline.db", 3)
    await _cold_load_fails(url, IntegrityError)


async def test_a_thread_keeps_its_read_cursor(tmp_path: Path) -> None:
    """The cold read runs on the thread's kept cursor (no cursor made per load), one per
    thread, and a load on a closed store still says it is closed."""
    url = _url(tmp_path)
    await _short(url)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        backend = cold._reads.backend
        assert isinstance(backend, SQLiteBackend)
        assert (await cold.load("a")).data == DOCS[-1]
        kept = backend._read_cursor()
        assert backend._read_cursor() is kept
        assert (await cold.load("a")).data == DOCS[-1]
        assert backend._read_cursor() is kept
        other: list[Any] = []
        thread = threading.Thread(
            target=lambda: other.extend([backend._read_cursor(), backend.state_rows_now("a")])
        )
        thread.start()
        thread.join()
        assert other[0] is not kept
        assert other[1][0] == 3 and len(other[1][3]) == 3  # (head 3, three events)
    with pytest.raises(StoreClosed):
        backend.state_rows_now("a")
