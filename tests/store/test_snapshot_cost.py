"""The snapshot policy by replay cost (``snapshot_every="cost"``): a snapshot once replaying
the events since the last one costs as much as decoding it, so a cold load at any head
replays a bounded amount of work; a save's snapshot is the packed bytes it holds."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.formats import JSON, MSGPACK
from statekeeper.records import RawEvent
from statekeeper.store.snapshots import COST_MAX_EVENTS, EVENT_COST, MIN_COST
from statekeeper.store.tails import TAIL_EVERY

MESSAGES = [{"role": "user", "content": f"message {i} " + "words " * 50} for i in range(170)]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cost.db'}?synchronous=OFF"


async def _snapshot_bytes(store: StateStore, agent_id: str) -> dict[int, int]:
    """seq -> stored bytes of every snapshot of ``agent_id``."""
    out: dict[int, int] = {}
    below: int | None = None
    while True:
        snap = await store.backend.latest_snapshot(agent_id, below)
        if snap is None:
            return out
        out[snap.seq] = len(snap.payload)
        if snap.seq == 1:
            return out
        below = snap.seq - 1


async def whole_and_tails(store: StateStore, agent_id: str) -> tuple[dict[int, int], list[int]]:
    """seq -> stored bytes of every whole snapshot of ``agent_id``, and the seqs of its
    tail snapshots (store/tails.py: deltas on the snapshot before them)."""
    whole: dict[int, int] = {}
    tails: list[int] = []
    for seq in sorted(await _snapshot_bytes(store, agent_id)):
        raw = await store.backend.latest_snapshot(agent_id, seq)
        assert raw is not None and raw.seq == seq
        body, _ = store._reads.open_snapshot(agent_id, raw)
        if "base" in body:
            tails.append(seq)
        else:
            whole[seq] = len(raw.payload)
    return whole, tails


def tail_positions(whole: list[int], head: int) -> list[int]:
    """Where tail snapshots fall: every TAIL_EVERY events past each whole snapshot,
    before the next one (and up to the head)."""
    out: list[int] = []
    for i, seq in enumerate(whole):
        stop = whole[i + 1] if i + 1 < len(whole) else head + 1
        out.extend(range(seq + TAIL_EVERY, stop, TAIL_EVERY))
    return out


def rule_positions(
    events: list[RawEvent], stored: dict[int, int], base: int, least: int
) -> list[int]:
    """The seqs the replay-cost rule snapshots at, worked out from the stored sizes: due
    with the event whose replay cost (bytes + EVENT_COST each) reaches the last
    snapshot's bytes + ``base`` (at least ``least``), or the 100th since it."""
    expected: list[int] = []
    snapshot_bytes = replay = count = 0
    for event in events:
        count += 1
        replay += len(event.payload)
        if count >= COST_MAX_EVENTS or replay + EVENT_COST * count >= max(
            snapshot_bytes + base, least
        ):
            expected.append(event.seq)
            snapshot_bytes, replay, count = stored.get(event.seq, -1), 0, 0
    return expected


async def test_a_cold_load_replays_at_most_one_snapshot_worth_by_cost(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    async with StateStore(url, snapshot_every="cost") as writer:
        cold = StateStore(url, cache_size=0)
        decoded: list[int] = []
        decode_next = cold.codec.decode_next

        def counting(agent_id: str, seq: int, *args: Any) -> Any:
            decoded.append(seq)
            return decode_next(agent_id, seq, *args)

        decode_chain = cold.codec.decode_chain

        def counting_chain(agent_id: str, events: Any, prev: Any, **kw: Any) -> Any:
            out = decode_chain(agent_id, events, prev, **kw)
            decoded.extend(e[0] for e in events[: len(out[0])])
            return out

        decode_appends = cold.codec.decode_appends

        def counting_appends(agent_id: str, events: Any, prev: Any) -> Any:
            out = decode_appends(agent_id, events, prev)
            if out is not None:  # (a run of appends decoded whole: every event of it)
                decoded.extend(e[0] for e in events)
            return out

        cold.codec.decode_next = counting  # type: ignore[method-assign,assignment]
        cold.codec.decode_chain = counting_chain  # type: ignore[method-assign,assignment]
        cold.codec.decode_appends = counting_appends  # type: ignore[method-assign]
        try:
            for n in range(1, len(MESSAGES) + 1):
                await writer.save("chat", {"messages": MESSAGES[:n]})
                decoded.clear()
                loaded = await cold.load("chat")
                assert loaded.data == {"messages": MESSAGES[:n]}
                snap = await writer.backend.latest_snapshot("chat")
                after = snap.seq if snap is not None else 0
                # the load replayed exactly the events after the latest snapshot...
                assert decoded == list(range(after + 1, n + 1))
                events: list[RawEvent] = await writer.backend.read("chat", after, None)
                replay = sum(len(e.payload) for e in events) + EVENT_COST * len(events)
                stored = len(snap.payload) if snap is not None else 0
                # ...and they cost less than decoding that snapshot (at least MIN_COST)
                assert replay < max(stored + EVENT_COST, MIN_COST), (n, after)
                assert len(events) < COST_MAX_EVENTS
        finally:
            await cold.close()


async def test_the_cost_policys_snapshot_positions(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path), snapshot_every="cost") as store:
        for n in range(1, len(MESSAGES) + 1):
            await store.save("chat", {"messages": MESSAGES[:n]})
        stored = await _snapshot_bytes(store, "chat")
        events = await store.backend.read("chat", 0, None)
    # the rule, worked out from the stored sizes: due with the event whose replay cost
    # (bytes + EVENT_COST each) reaches the last snapshot's bytes + EVENT_COST (>= MIN_COST)
    expected = rule_positions(events, stored, EVENT_COST, MIN_COST)
    assert sorted(stored) == expected
    gaps = [b - a for a, b in itertools.pairwise(expected)]
    assert gaps[-1] > gaps[0]  # further apart as the state grows
    assert gaps == sorted(gaps)


async def test_a_number_keeps_its_exact_interval(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path), snapshot_every=25) as store:
        for n in range(1, 101):
            await store.save("chat", {"messages": MESSAGES[:n]})
        whole, tails = await whole_and_tails(store, "chat")
        assert sorted(whole) == [25, 50, 75, 100]
        assert tails == tail_positions([25, 50, 75, 100], 100)


async def test_a_saved_state_is_snapshotted_as_its_packed_bytes(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with StateStore(url, snapshot_every=4) as store:
        serialised: list[str] = []
        serialize = store.codec.serialize

        def spy(value: Any, root: str = "value") -> bytes:
            serialised.append(root)
            return serialize(value, root)

        store.codec.serialize = spy  # type: ignore[method-assign]
        for n in range(1, 9):
            await store.save("chat", {"messages": MESSAGES[:n], "turn": n, "score": n / 3})
        snap = await store.backend.latest_snapshot("chat")
        assert snap is not None and snap.seq == 8
        # the state was not serialised again for the snapshot: its bytes are the save's
        assert "state" not in serialised
        assert snap.payload[1] == MSGPACK
    async with StateStore(url, cache_size=0) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:8], "turn": 8, "score": 8 / 3}
        assert (await cold.verify(["chat"])).ok


async def test_a_typed_state_is_snapshotted_through_the_codec(tmp_path: Path) -> None:
    url = _url(tmp_path)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    async with StateStore(url, snapshot_every=2) as store:
        await store.save("typed", {"at": when, "n": 1})
        await store.save("typed", {"at": when, "n": 2})
        snap = await store.backend.latest_snapshot("typed")
        assert snap is not None and snap.seq == 2 and snap.payload[1] == JSON
    async with StateStore(url, cache_size=0) as cold:
        assert (await cold.load("typed")).data == {"at": when, "n": 2}


@pytest.mark.parametrize("bad", ["costs", 0, -1, 1.5, None])
async def test_a_bad_snapshot_every_is_refused(tmp_path: Path, bad: Any) -> None:
    from statekeeper.errors import StatekeeperError

    with pytest.raises(StatekeeperError, match="snapshot_every"):
        StateStore(_url(tmp_path), snapshot_every=bad)
    assert not (tmp_path / "cost.db").exists()
