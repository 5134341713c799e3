"""``list(None)`` reads each thread once.

It read every thread twice: ``_open`` folded the thread's document (a store ``get``),
then the scan for its checkpoints folded the whole stream again from its first event
(1200 threads of 3 checkpoints: 0.53 s against SqliteSaver's 0.043 s; now 0.35 s, see
``docs/benchmarks.md``, "lglist"). A thread never compacted is now scanned once, its
document the one the scan ends with (and its first document the one its first
event holds, not a second read at seq 1); a compacted thread (its base generation moved)
is still resolved first, and listed the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import Api, Chain, config


def _key(tup: Any) -> tuple[Any, ...]:
    conf = tup.config["configurable"]
    return (
        conf["thread_id"],
        conf["checkpoint_ns"],
        conf["checkpoint_id"],
        tup.checkpoint["channel_values"],
        tup.metadata,
        sorted(map(repr, tup.pending_writes or [])),
    )


async def test_list_none_folds_no_thread_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    with StatekeeperSaver.from_url(url) as saver:
        chains = [Chain(Api(saver, "sync")) for _ in range(4)]
        for chain in chains:
            for i in range(3):
                await chain.step({"i": i, "who": chain.thread_id}, {"user": f"u{i}"})
            saver.put_writes(chain.configs[-1], [("i", 9)], "task-1")
        # one thread compacted: its base generation is gone, a new one holds it
        saver.prune_retention([chains[0].thread_id], keep_last=1)
        wanted = sorted(_key(t) for t in saver.list(None))
    assert len(wanted) == 1 + 3 * 3

    folds: list[str] = []
    for name in ("get", "_get_shared", "load"):
        real = getattr(StateStore, name)

        async def counted(
            self: StateStore, agent_id: str, *a: Any, _real: Any = real, **k: Any
        ) -> Any:
            folds.append(agent_id)
            return await _real(self, agent_id, *a, **k)

        monkeypatch.setattr(StateStore, name, counted)
    with StatekeeperSaver.from_url(url) as saver:  # a new saver: nothing cached
        listed = sorted(_key(t) for t in saver.list(None))
        assert listed == wanted  # the same checkpoints, values, metadata and writes
        # only the compacted thread's document is folded (to resolve its generation)
        assert all(chains[0].thread_id in agent for agent in folds), folds
        folds.clear()
        assert sorted(_key(t) for t in saver.list(None, filter={"user": "u2"})) == [
            k for k in wanted if k[4].get("user") == "u2"
        ]
        assert len(folds) <= 1, folds
        one = chains[1]
        assert [_key(t) for t in saver.list(config(one.thread_id))] == [
            k for k in sorted(wanted, reverse=True) if k[0] == one.thread_id
        ]
