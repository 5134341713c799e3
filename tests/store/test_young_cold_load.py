"""A young agent's cold load (docs/benchmarks.md, "coldyoung"): under the default policy
(``snapshot_every="bounded"``) an agent's first whole snapshot is stored
``FIRST_WHOLE`` events in, and tails after it (store/tails.py), so an agent saved a few
dozen times loads cold as an old one does — the whole snapshot, at most two tails and
``TAIL_EVERY - 1`` events — rather than replaying every event from its start."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.store import snapshots
from statekeeper.store.tails import TAIL_EVERY

from .test_snapshot_cost import MESSAGES, tail_positions, whole_and_tails
from .test_tail_snapshots import _replayed


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'bounded.db'}?synchronous=OFF"


async def test_a_young_agents_cold_load_replays_at_most_a_tails_worth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (docs/benchmarks.md, "coldyoung"): the first whole snapshot at snapshots.FIRST_WHOLE, tails
    # after it, so an agent saved a few dozen times (bench_hotpath.py's workloads: up to
    # 51 saves) loads cold as an old one does, not by replaying every event
    url = _url(tmp_path)
    counts = _replayed(monkeypatch)
    async with StateStore(url) as writer, StateStore(url, cache_size=0) as cold:
        for n in range(1, 61):
            await writer.save("chat", {"messages": MESSAGES[:n]})
            counts.clear()
            loaded = await cold.load("chat")
            assert loaded.data == {"messages": MESSAGES[:n]} and loaded.seq == n
            assert sum(counts) < TAIL_EVERY, n
        stored, tails = await whole_and_tails(writer, "chat")
        assert min(stored) == snapshots.FIRST_WHOLE
        assert tails == tail_positions(sorted(stored), 60)
        assert (await cold.verify()).ok


async def test_a_young_agents_edited_first_snapshot_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with StateStore(url) as store:
        for n in range(1, 21):
            await store.save("chat", {"messages": MESSAGES[:n]})
    with closing(sqlite3.connect(tmp_path / "bounded.db")) as conn:
        (payload,) = conn.execute(
            "SELECT payload FROM sk_snapshots WHERE seq = ?", (snapshots.FIRST_WHOLE,)
        ).fetchone()
        edited = payload[:-3] + bytes([payload[-3] ^ 1]) + payload[-2:]
        conn.execute("UPDATE sk_snapshots SET payload = ? WHERE seq = ?", (edited, snapshots.FIRST_WHOLE))
        conn.commit()
    async with StateStore(url, cache_size=0) as cold:
        loaded = await cold.load("chat")  # from the events, the tails on it not trusted
        assert loaded.data == {"messages": MESSAGES[:20]} and loaded.seq == 20
        assert not (await cold.verify()).ok


async def test_a_young_agent_appended_to_by_ops_keeps_the_replay_rule(tmp_path: Path) -> None:
    # events appended as ops hold no packed bytes to make tails of (as after a whole
    # snapshot: tests/store/test_tail_snapshots.py): no early whole snapshot either
    url = _url(tmp_path)
    async with StateStore(url) as store:
        await store.save("chat", {"messages": MESSAGES[:1]})
        for n in range(1, 20):
            op = {"op": "add", "path": "/messages/-", "value": MESSAGES[n]}
            await store.append("chat", "note", ops=[op])
        snap = await store.backend.latest_snapshot("chat")
    async with StateStore(url, cache_size=0) as cold:
        assert (await cold.load("chat")).data == {"messages": MESSAGES[:20]}
    assert snap is None
