"""Thread ids at the edges (trialdata): each one its own thread, stored and read back
under its id; a thread id that is not valid Unicode (a lone surrogate) is refused with
``InvalidArgument`` naming ``thread_id``, not a bare ``UnicodeEncodeError``."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.errors import InvalidArgument
from statekeeper.integrations.langgraph import StatekeeperSaver

CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")
IDS = ["", "#", "a#0", "a", "A", "a/b", "%", "%23", "\x00", "a b", CAFE_NFC, CAFE_NFD]


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _put(saver: StatekeeperSaver, thread_id: str) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": repr(thread_id)}
    checkpoint["channel_versions"] = {"v": 1}
    saver.put(_config(thread_id), checkpoint, {"source": "input", "step": 1}, {"v": 1})


def test_edge_thread_ids_are_threads_of_their_own(tmp_path: Path) -> None:
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path / 'lg.db'}") as saver:
        for thread_id in IDS:
            _put(saver, thread_id)
        for thread_id in IDS:
            got = saver.get_tuple(_config(thread_id))
            assert got is not None
            assert got.checkpoint["channel_values"]["v"] == repr(thread_id)
        with pytest.raises(InvalidArgument, match="thread_id"):
            _put(saver, "\ud800")
        with pytest.raises(InvalidArgument, match="thread_id"):
            saver.get_tuple(_config("\ud800"))
