"""An older checkpoint is read from its own event and the latest document (its
record: see ``statekeeper.integrations.langgraph.history``), not by folding the thread
up to its seq; wherever the record cannot serve (a list edited in place since, a big
value changed since, a stretch written without records), the read folds as before and
returns the same. LangGraph's own ``InMemorySaver`` is the oracle throughout."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import history as history_module

from .conftest import config, new_thread

BIG = {"doc": "d" * 400}  # over history.INLINE_MAX: recorded by name, read from the latest


class Both:
    """The same puts and writes through statekeeper's saver and InMemorySaver."""

    def __init__(self, saver: StatekeeperSaver) -> None:
        self.savers: list[Any] = [saver, InMemorySaver()]
        self.thread = new_thread()
        self.values: dict[str, Any] = {}
        self.versions: dict[str, int] = {}
        self.ids: list[str] = []

    def step(self, values: dict[str, Any], *, write: Any = None) -> None:
        changed = {
            ch
            for ch in {*values, *self.values}
            if ch not in values or ch not in self.values or values[ch] != self.values[ch]
        }
        for ch in changed:
            self.versions[ch] = self.versions.get(ch, 0) + 1
        self.values = dict(values)
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp.update(
            id=str(uuid6(clock_seq=-1)),
            channel_values=dict(values),
            channel_versions=dict(self.versions),
            versions_seen={"node": {ch: v for ch, v in self.versions.items()}},
            updated_channels=sorted(changed),
        )
        cp.pop("pending_sends", None)
        meta = {"source": "loop", "step": len(self.ids), "parents": {}}
        parent = config(self.thread, "", self.ids[-1] if self.ids else None)
        new_versions = {ch: self.versions[ch] for ch in changed}
        for saver in self.savers:
            saved = saver.put(parent, cp, meta, new_versions)
            if write is not None:
                saver.put_writes(saved, [("messages", write)], f"task-{len(self.ids)}", "p")
        self.ids.append(cp["id"])


def _same(got: Any, expected: Any) -> None:
    assert got is not None and expected is not None
    assert (got.checkpoint, got.metadata, got.pending_writes, got.parent_config) == (
        expected.checkpoint,
        expected.metadata,
        expected.pending_writes,
        expected.parent_config,
    )


def _chat(saver: StatekeeperSaver, turns: int, edit: Callable[[int, dict[str, Any]], None]) -> Both:
    """A growing list channel, a transient small one, a big one kept for a while."""
    both = Both(saver)
    for turn in range(turns):
        values: dict[str, Any] = {
            "messages": [*both.values.get("messages", []), {"turn": turn, "x": "m" * 40}]
        }
        if turn % 3 == 0:
            values["flag"] = turn  # there every third step, absent between
        if turn >= 4:
            values["big"] = BIG
        edit(turn, values)
        both.step(values, write={"w": turn} if turn % 2 else None)
    return both


def _cold(saver: StatekeeperSaver) -> StatekeeperSaver:
    return StatekeeperSaver(saver.store, _portal=saver._portal)


def _counted(saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the events a saver decodes and of its document loads at a seq."""
    counts = {"events": 0, "loads_at": 0}
    store = saver.store
    history, load = store.history, store.load

    async def counted_history(agent_id: str, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in history(agent_id, **kwargs):
            counts["events"] += 1
            yield event

    async def counted_load(agent_id: str, **kwargs: Any) -> Any:
        if kwargs.get("at_seq") is not None:
            counts["loads_at"] += 1
        return await load(agent_id, **kwargs)

    monkeypatch.setattr(store, "history", counted_history)
    monkeypatch.setattr(store, "load", counted_load)
    return counts


def test_a_cold_older_read_reads_its_event_and_window_only(
    saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = _chat(saver, 40, lambda turn, values: None)
    oracle = both.savers[1]
    cold = _cold(saver)
    _same(cold.get_tuple(config(both.thread)), oracle.get_tuple(config(both.thread)))
    counts = _counted(saver, monkeypatch)
    for cid in both.ids[:-1]:
        before = counts["events"]
        _same(
            cold.get_tuple(config(both.thread, "", cid)),
            oracle.get_tuple(config(both.thread, "", cid)),
        )
        # its own event, and the window after it where its writes were archived
        assert counts["events"] - before <= 1 + history_module.FIRST_WINDOW
    assert counts["loads_at"] == 0  # no fold of the thread up to any checkpoint


def test_older_reads_where_the_record_cannot_serve_fold_and_equal_the_oracle(
    saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list element edited in place (turn 20), the big value changed (turn 26), a
    channel dropped and back (turn 30): checkpoints before each change fold, the rest
    read by record, and every one equals InMemorySaver's."""

    def edit(turn: int, values: dict[str, Any]) -> None:
        if turn >= 20:
            values["messages"][3] = {"turn": 3, "x": "edited"}
        if turn >= 26:
            values["big"] = {"doc": "e" * 400}
        if turn == 30:
            del values["big"]

    both = _chat(saver, 36, edit)
    oracle = both.savers[1]
    cold = _cold(saver)
    counts = _counted(saver, monkeypatch)
    for cid in reversed(both.ids):
        _same(
            cold.get_tuple(config(both.thread, "", cid)),
            oracle.get_tuple(config(both.thread, "", cid)),
        )
    assert 0 < counts["loads_at"] < len(both.ids) - 1  # some by record, some folded


def test_a_stretch_written_without_records_still_reads_as_the_oracle(
    saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Puts by a saver that keeps no records (streams written before records, or an
    older version of the saver writing the thread), first and then between puts that
    keep them: every checkpoint reads as InMemorySaver's, by a saver with nothing
    cached."""
    keeping = StatekeeperSaver._ops_checkpoint

    def no_record(self: StatekeeperSaver, *args: Any, **kwargs: Any) -> Any:
        ops, key = keeping(self, *args, **kwargs)
        kept = [op for op in ops if not op["path"].endswith("/rec")]
        for op in kept:
            if type(op.get("value")) is dict and "rec" in op["value"] and "cp" in op["value"]:
                op["value"] = {k: v for k, v in op["value"].items() if k != "rec"}
        return kept, key

    both = Both(saver)
    for turn in range(24):
        with monkeypatch.context() as patched:
            if turn < 6 or 12 <= turn < 15:
                patched.setattr(StatekeeperSaver, "_ops_checkpoint", no_record)
            messages = [*both.values.get("messages", []), {"turn": turn}]
            both.step({"messages": messages, "big": {"doc": str(turn // 8) * 400}})
    oracle = both.savers[1]
    cold = _cold(saver)
    counts = _counted(saver, monkeypatch)
    for cid in both.ids:
        _same(
            cold.get_tuple(config(both.thread, "", cid)),
            oracle.get_tuple(config(both.thread, "", cid)),
        )
    assert counts["loads_at"] > 0  # the checkpoints before the last break folded
