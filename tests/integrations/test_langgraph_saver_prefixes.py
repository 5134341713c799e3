"""Two LangGraph savers sharing a store with prefixes where one continues the other
(``app`` and ``app2``): saver ``app``'s thread ``2x`` is the agent ``app2x#0``, which
is saver ``app2``'s thread ``x``. Before: ``app`` listed that thread, read its
checkpoints as its own, wrote into it and deleted it, without an error. Each stream's
document names its thread, so the other saver's is refused (ConfigurationError,
nothing read or written); prefixes ending in ``/`` (``lg/`` and ``lg/v2/``) never meet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper import SyncStateStore
from statekeeper.errors import ConfigurationError
from statekeeper.integrations.langgraph import StatekeeperSaver


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(saver: StatekeeperSaver, thread: str, step: int = 0) -> None:
    checkpoint = empty_checkpoint()
    saver.put(_config(thread), checkpoint, {"source": "input", "step": step}, {})


@pytest.fixture
def savers(tmp_path: Path) -> Iterator[tuple[StatekeeperSaver, StatekeeperSaver]]:
    url = f"sqlite:///{tmp_path / 's.db'}"
    outer = StatekeeperSaver.from_url(url, prefix="app")
    inner = StatekeeperSaver.from_url(url, prefix="app2")
    try:
        yield outer, inner
    finally:
        outer.close()
        inner.close()


def test_a_saver_does_not_read_or_write_another_savers_thread(
    savers: tuple[StatekeeperSaver, StatekeeperSaver], tmp_path: Path
) -> None:
    outer, inner = savers
    _put(inner, "x")
    with pytest.raises(ConfigurationError, match="another saver"):
        outer.get_tuple(_config("2x"))  # (before: inner's checkpoint)
    with pytest.raises(ConfigurationError, match="another saver"):
        _put(outer, "2x", 1)  # (before: written into inner's thread x)
    with pytest.raises(ConfigurationError, match="another saver"):
        list(outer.list(None))  # (before: inner's thread listed as outer's "2x")
    with pytest.raises(ConfigurationError, match="another saver"):
        outer.delete_thread("2x")  # (before: inner's thread deleted)
    got = inner.get_tuple(_config("x"))
    assert got is not None and got.metadata["step"] == 0
    assert [t.config["configurable"]["thread_id"] for t in inner.list(None)] == ["x"]


def test_a_saver_does_not_prune_another_savers_thread(
    savers: tuple[StatekeeperSaver, StatekeeperSaver],
) -> None:
    outer, inner = savers
    _put(inner, "x", 0)
    _put(inner, "x", 1)
    for prune in (
        lambda: outer.prune(["2x"]),
        lambda: outer.prune(["2x"], strategy="delete"),
        lambda: outer.prune_retention(keep_last=1),  # (every thread of the saver)
        lambda: outer.copy_thread("2x", "mine"),
    ):
        with pytest.raises(ConfigurationError, match="another saver"):
            prune()
    assert [t.metadata["step"] for t in inner.list(_config("x"))] == [1, 0]


def test_prefixes_ending_in_a_slash_do_not_meet(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    outer = StatekeeperSaver.from_url(url, prefix="lg/")
    inner = StatekeeperSaver.from_url(url, prefix="lg/v2/")
    try:
        _put(outer, "t")
        _put(inner, "t", 5)
        _put(outer, "v2")
        assert sorted(c.config["configurable"]["thread_id"] for c in outer.list(None)) == [
            "t",
            "v2",
        ]
        assert [c.metadata["step"] for c in inner.list(None)] == [5]
        outer.delete_thread("t")
        assert inner.get_tuple(_config("t")) is not None
    finally:
        outer.close()
        inner.close()
    with SyncStateStore(url) as store:
        assert sorted(a.agent_id for a in store.list_agents()) == ["lg/v2#0", "lg/v2/t#0"]
