"""``records.make_snapshot`` / ``make_raw_snapshot`` (the read path's constructors,
through the slots' setters) build exactly what the dataclasses' own ``__init__`` builds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.records import RawSnapshot, Snapshot, make_raw_snapshot, make_snapshot

SNAPSHOT_ARGS: list[tuple[Any, ...]] = [
    ("agent-1", 7, "running", {"messages": ["a", {"b": 1}]}, 3, 1.5, 2.5, 2.0),
    ("a", 1, None, {}, 1, 0.0, 0.0, 0.0),
    ("ä/ü", 2**40, "", {"x": None}, 9, 1e9, 1e9 + 0.25, 123.125),
]


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize("args", SNAPSHOT_ARGS)
def test_make_snapshot_equals_the_dataclass_one_in_every_field(args: tuple[Any, ...]) -> None:
    made, built = make_snapshot(*args), Snapshot(*args)
    assert type(made) is Snapshot
    assert _fields(made) == _fields(built)
    assert made == built and repr(made) == repr(built)
    assert made.data is args[3]  # (the document itself: no copy)


def test_make_snapshot_defaults_state_entered_at_as_the_dataclass_does() -> None:
    args: tuple[Any, ...] = ("a", 1, "s", {}, 1, 1.0, 2.0)
    assert make_snapshot(*args) == Snapshot(*args)
    assert make_snapshot(*args).state_entered_at == 0.0


@pytest.mark.parametrize("args", [(5, 1.25, b"\x01\x41\x00payload", b"c" * 32), (1, 0.0, b"", b"")])
def test_make_raw_snapshot_equals_the_dataclass_one_in_every_field(
    args: tuple[Any, ...],
) -> None:
    made, built = make_raw_snapshot(*args), RawSnapshot(*args)
    assert type(made) is RawSnapshot
    assert _fields(made) == _fields(built)
    assert made == built and hash(made) == hash(built)


def test_made_records_stay_frozen() -> None:
    snap = make_snapshot("a", 1, None, {}, 1, 0.0, 0.0)
    raw = make_raw_snapshot(1, 0.0, b"p", b"c")
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.seq = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        raw.payload = b"q"  # type: ignore[misc]
    assert dataclasses.replace(snap, seq=2).seq == 2


async def test_a_cold_load_at_a_snapshot_returns_every_field(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url, snapshot_every=3) as store:
        for i in range(3):
            await store.save("a", {"n": i}, fsm_state=f"s{i}")
        warm = await store.load("a")
    async with StateStore(url, cache_size=0) as store:
        raw = await store.backend.latest_snapshot("a")
        head, _, snap, events = await store.backend.read_state("a")
        cold = await store.load("a")
    assert raw is not None and snap == raw and (head, events) == (3, [])
    assert type(cold) is Snapshot
    assert _fields(cold) == _fields(warm)
    assert (cold.seq, cold.fsm_state, cold.data) == (3, "s2", {"n": 2})
