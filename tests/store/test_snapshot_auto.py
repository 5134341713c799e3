"""``snapshot_every="auto"`` (issues 11 and 16): snapshots chosen by replay cost, so a
load at any head replays at most about as much work as decoding the snapshot it starts
from, whatever the state's size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConfigurationError, InvalidArgument
from statekeeper.store.snapshots import AUTO_EVENT_COST, AUTO_MAX_EVENTS, AUTO_MIN_COST

from ..conftest import FakeClock
from .test_hot_path import StateCounting


def message(i: int) -> dict[str, str]:
    return {"role": "user" if i % 2 else "assistant", "content": f"{i:05d} " + "x" * 300}


async def replay_at_every_head(
    tmp_path: Path, open_store: Callable[..., StateStore], docs: list[dict[str, object]]
) -> list[tuple[int, int, int]]:
    """Save ``docs`` one by one with ``snapshot_every="auto"``; after each, a cold load
    from a fresh reader: (events replayed, bytes replayed, bytes of the snapshot)."""
    path = tmp_path / "auto.db"
    writer = open_store(SQLiteBackend(path), clock=FakeClock(), snapshot_every="auto")
    backend = StateCounting(SQLiteBackend(path))
    reader = open_store(backend, cache_size=0)
    out = []
    for doc in docs:
        await writer.save("a1", doc)
        _, _, snap, events = await backend.read_state("a1")
        assert (await reader.load("a1")).data == doc
        out.append(
            (len(events), sum(len(e.payload) for e in events), len(snap.payload) if snap else 0)
        )
    return out


async def test_a_large_state_is_snapshotted_once_replay_costs_a_snapshot_decode(
    tmp_path: Path, open_store: Callable[..., StateStore]
) -> None:
    # a chat growing to 120 messages of ~300 characters (~40 KB): with
    # snapshot_every=100 a load would replay up to 99 events
    docs: list[dict[str, object]] = [
        {"messages": [message(i) for i in range(n + 1)]} for n in range(120)
    ]
    seen = await replay_at_every_head(tmp_path, open_store, docs)
    for events, replayed, snap_bytes in seen:
        # the bound the policy keeps: the replay before the last event was below it
        cost = replayed + AUTO_EVENT_COST * events
        assert cost < max(snap_bytes + AUTO_EVENT_COST, AUTO_MIN_COST) + AUTO_EVENT_COST + 600
    worst = max(events for events, _, _ in seen[60:])
    assert worst <= 12, seen  # ~40 KB state, ~450 B events: at most ~9 replayed
    assert max(events for events, _, _ in seen) < AUTO_MAX_EVENTS


async def test_a_small_state_is_not_snapshotted_with_every_event(
    tmp_path: Path, open_store: Callable[..., StateStore]
) -> None:
    docs: list[dict[str, object]] = [{"n": n, "status": "ok"} for n in range(40)]
    seen = await replay_at_every_head(tmp_path, open_store, docs)
    snapshots = {snap for _, _, snap in seen}
    assert max(events for events, _, _ in seen) <= AUTO_MIN_COST // AUTO_EVENT_COST
    # a snapshot every other event: 40 events, about 20 snapshots, not 40
    writer_snaps = sum(1 for i, s in enumerate(seen) if s[0] == 0)
    assert 17 <= writer_snaps <= 21, seen
    assert snapshots  # and they are small


async def test_the_bound_holds_across_processes(
    tmp_path: Path, open_store: Callable[..., StateStore]
) -> None:
    """A store opened later folds the snapshot and knows its size: it snapshots on the
    same cost as the store that wrote it."""
    path = tmp_path / "auto.db"
    first = open_store(SQLiteBackend(path), clock=FakeClock(), snapshot_every="auto")
    msgs = [message(i) for i in range(200)]
    backend = SQLiteBackend(path)
    n = 0
    while True:  # up to one event past a snapshot, with 60 messages or more
        await first.save("a1", {"messages": msgs[: n + 1]})
        n += 1
        head, _, before, _ = await backend.read_state("a1")
        if n >= 60 and before is not None and head == before.seq + 1:
            break
    await first.close()
    second = open_store(SQLiteBackend(path), clock=FakeClock(), snapshot_every="auto")
    seen = []
    for m in range(n, 200):
        await second.save("a1", {"messages": msgs[: m + 1]})
        _, _, snap, events = await backend.read_state("a1")
        assert snap is not None
        seen.append((len(events), sum(len(e.payload) for e in events), len(snap.payload)))
    await backend.close()
    for events, replayed, snap_bytes in seen:  # type: ignore[assignment]
        assert replayed + AUTO_EVENT_COST * events < snap_bytes + 2 * AUTO_EVENT_COST + 600  # type: ignore[operator]
    # as seldom as the first store would: a ~35-66 KB state, ~4.5 KB of cost per event,
    # a snapshot every 8-15 events (not every 4, as for a state of unknown size)
    written = [n + i + 1 for i, (events, _, _) in enumerate(seen) if events == 0]
    assert 8 <= len(written) <= (200 - n) // 7, seen
    assert written[0] - before.seq >= 6, (before.seq, written)  # the first one too


def test_snapshot_every_accepts_auto_and_refuses_other_words(tmp_path: Path) -> None:
    store = StateStore("memory://", snapshot_every="auto", witness=False)
    assert store.snapshot_every == "auto"
    assert store.snapshot_events == AUTO_MAX_EVENTS
    assert StateStore("memory://", snapshot_every=7, witness=False).snapshot_events == 7
    with pytest.raises(InvalidArgument, match="snapshot_every"):
        StateStore("memory://", snapshot_every="sometimes", witness=False)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="snapshot_every"):
        StateStore("memory://", snapshot_every=0, witness=False)
