"""The LangGraph saver keeps a channel value's key order across a fresh open (as
``SqliteSaver``, which stores the whole object, does): its checkpoints are stored as
patches, which recorded nothing for a dict whose keys only moved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import checkpoint, config, new_thread


def test_a_channel_dict_reordered_is_loaded_in_its_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    thread = new_thread()
    values = [{"s": {"a": 1, "b": 2}}, {"s": {"c": 3, "b": 2, "a": 1}}]
    saver = StatekeeperSaver.from_url(url)
    try:
        conf: Any = config(thread)
        for i, vals in enumerate(values, start=1):
            conf = saver.put(conf, checkpoint(vals, {"s": i}), {"step": i}, {"s": i})
    finally:
        saver.close()
    fresh = StatekeeperSaver.from_url(url)
    try:
        got = fresh.get_tuple(config(thread))
        assert got is not None
        assert list(got.checkpoint["channel_values"]["s"]) == ["c", "b", "a"]
    finally:
        fresh.close()
