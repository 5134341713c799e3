"""Key order kept on every engine and read path (see test_key_order.py): PostgreSQL and
Redis, encrypted or not, JSON and msgpack, at the head, at an older seq and at an older
time, after snapshots and after a retention compaction, in a fresh store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

STATES: list[dict[str, Any]] = [
    {"a": 1, "b": 2},
    {"c": 3, "b": 2, "a": 1},  # the trial's case
    {"c": 3, "a": 1, "b": {"x": 1, "y": [1, {"p": 1, "q": 2}]}},
    {"c": 3, "a": 1, "b": {"y": [1, {"q": 2, "p": 1}], "x": 1}},  # nested, reordered
    {"a": 1, "c": 3, "b": {"y": [1, {"q": 2, "p": 1}], "x": 1}},  # one key moved
    {"a": 1, "c": 3, "b": {"y": [1, {"q": 2, "p": 1}], "x": 1}, "d": 0},
]


def exact(a: Any) -> str:
    def tag(x: Any) -> Any:
        if isinstance(x, dict):
            return [[k, tag(v)] for k, v in x.items()]
        if isinstance(x, list):
            return [tag(v) for v in x]
        return [type(x).__name__, x]

    return json.dumps(tag(a))


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "memory"])
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("keyed", [False, True])
async def test_every_read_path_keeps_the_saved_order(
    tmp_path: Path, engine: str, fmt: str, keyed: bool
) -> None:
    now = [1000.0]
    kw: dict[str, Any] = {"format": fmt, "snapshot_every": 2, "clock": lambda: now[0]}
    if keyed:
        kw["keyring"] = Keyring({"k1": generate_key()})
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, durability="sync", **kw) as store:
            for i, state in enumerate(STATES):
                now[0] = 1010.0 + 10 * i
                await store.save("a", state)
            if engine == "memory":  # (no fresh process: the live store; a fresh one on
                # the same MemoryBackend is test_key_order.py's)
                await _reads(store, 0)
                return
        async with StateStore(url, durability="sync", **kw) as fresh:
            await _reads(fresh, 0)
            report = await apply_retention(fresh, RetentionPolicy.parse("* keep_last=3\n"))
            assert [a.outcome for a in report.actions] == ["done"]
        async with StateStore(url, durability="sync", **kw) as fresh:
            await _reads(fresh, len(STATES) - 3)


async def _reads(store: StateStore, compacted_to: int) -> None:
    head = await store.get("a")
    assert head is not None and exact(head.data) == exact(STATES[-1])
    for seq in range(compacted_to + 1, len(STATES) + 1):
        state = STATES[seq - 1]
        assert exact((await store.load("a", at_seq=seq)).data) == exact(state), seq
        at = 1010.0 + 10 * (seq - 1) + 5
        assert exact((await store.load("a", at_time=at)).data) == exact(state), seq
