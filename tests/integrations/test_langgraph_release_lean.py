"""A run's release is made by the store's lean keyed append (one statement on SQLite),
as the run's checkpoints are, not by the general append; the thread is free for
another saver at once and the file verifies. A lease or a wait that is not a finite
time is refused when the saver is made (an infinite lease failed every run)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConfigurationError
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import new_thread
from .test_langgraph_runs import reply_graph


def _spy(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(event types handed to the engine's ``commit_keyed``, event types of the store's
    general ``append``)."""
    keyed: list[str] = []
    general: list[str] = []
    commit_keyed = SQLiteBackend.commit_keyed
    append = StateStore.append

    def spied_keyed(backend: SQLiteBackend, row: Any) -> Any:
        keyed.append(row[2])
        return commit_keyed(backend, row)

    async def spied_append(
        store: StateStore, agent_id: str, event_type: str, *a: Any, **k: Any
    ) -> Any:
        general.append(event_type)
        return await append(store, agent_id, event_type, *a, **k)

    monkeypatch.setattr(SQLiteBackend, "commit_keyed", spied_keyed)
    monkeypatch.setattr(StateStore, "append", spied_append)
    return keyed, general


def test_a_runs_release_takes_the_lean_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, general = _spy(monkeypatch)
    url = f"sqlite:///{tmp_path}/lg.db"
    cfg: Any = {"configurable": {"thread_id": new_thread()}}
    with StatekeeperSaver.from_url(url, run_lease=3600) as saver:
        graph = reply_graph(lambda: None).compile(checkpointer=saver)
        for i in range(3):
            graph.invoke({"messages": [HumanMessage(f"m{i}", id=f"h{i}")]}, cfg, durability="sync")
        # each turn's release (the last event of its run) was built by the lean append
        assert keyed.count("lg.run") == 3, keyed
        assert "lg.run" not in general, general
        assert saver.get_tuple(cfg) is not None
    # released: another saver on the file runs the thread at once, with its own claim
    with StatekeeperSaver.from_url(url, run_lease=3600) as other:
        graph = reply_graph(lambda: None).compile(checkpointer=other)
        out = graph.invoke({"messages": [HumanMessage("m3", id="h3")]}, cfg, durability="sync")
        assert [m.content for m in out["messages"]][-2] == "m3"
    asyncio.run(_verified(url))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("run_lease", math.inf),
        ("run_lease", math.nan),
        ("run_lease", 0),
        ("writes_wait", math.inf),
        ("writes_wait", math.nan),
        ("writes_wait", -1),
    ],
)
def test_a_lease_or_wait_that_is_not_a_finite_time_is_refused_before_a_store_opens(
    tmp_path: Path, option: str, value: float
) -> None:
    """``run_lease=math.inf`` was accepted, and then every run failed on its claim with
    a ``SerializationError`` (a non-finite float cannot be stored); a NaN lease or wait
    passed the ``<= 0`` / ``< 0`` checks; an infinite wait overflowed the lock timeout
    of the first parked write. Refused when the saver is made, naming the option, with
    no file created."""
    db = tmp_path / "refused.db"
    with pytest.raises(ConfigurationError, match=option):
        StatekeeperSaver.from_url(f"sqlite:///{db}", **{option: value})
    assert not db.exists()


async def _verified(url: str) -> None:
    async with StateStore(url) as store:
        assert (await store.verify()).ok
