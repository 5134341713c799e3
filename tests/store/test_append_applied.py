"""``WritePipeline.append_applied`` (issue 12): the append of a caller that applied its
ops itself (the LangGraph saver) keeps the caller's document as the new state instead
of applying the ops a second time — the stored event and the state read back are the
ones ``StateStore.append`` makes, and the handed-over document is never changed by the
store afterwards (another writer's events are folded into a copy)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from statekeeper import StateStore, patch

OPS: list[list[dict[str, Any]]] = [
    [{"op": "add", "path": "/items/-", "value": {"n": 1, "tags": ["a"]}}],
    [
        {"op": "replace", "path": "/step", "value": 2},
        {"op": "add", "path": "/items/0/tags/-", "value": "b"},
        {"op": "add", "path": "/nested", "value": {"k": [1, 2]}},
    ],
    [{"op": "remove", "path": "/nested"}, {"op": "add", "path": "/items/-", "value": 3}],
]


async def _applied(store: StateStore, agent: str, doc: Any, ops: list[dict[str, Any]]) -> Any:
    """``ops`` appended through ``append_applied`` (copy-on-write, as the saver does);
    returns the document handed over."""
    after = patch.apply(doc, copy.deepcopy(ops))
    seq = await store.head(agent)
    result = await store._writes.append_applied(agent, "lg.cp", ops, seq, None, after, True)
    assert result is not None and result.last_seq == seq + 1
    return after


async def test_an_applied_append_stores_what_append_stores(tmp_path: Path) -> None:
    """Same events, same states, read back by a fresh store, as with ``append``."""
    start = {"items": [], "step": 0}
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        for agent in ("via-append", "via-applied"):
            await store.create(agent, start)
        doc: Any = start
        for ops in OPS:
            await store.append("via-append", "lg.cp", ops=copy.deepcopy(ops))
            doc = await _applied(store, "via-applied", doc, ops)
            assert (await store.get("via-applied")).data == doc  # type: ignore[union-attr]
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as fresh:
        plain = [(e.seq, e.type, e.ops, e.info) async for e in fresh.history("via-append")]
        applied = [(e.seq, e.type, e.ops, e.info) async for e in fresh.history("via-applied")]
        assert applied == plain
        for seq in range(1, len(OPS) + 2):
            want = await fresh.load("via-append", at_seq=seq)
            assert (await fresh.load("via-applied", at_seq=seq)).data == want.data
        assert (await fresh.get("via-applied")).data == doc  # type: ignore[union-attr]


async def test_another_writers_events_never_change_the_handed_over_document(
    tmp_path: Path,
) -> None:
    """The store folds another process's events into a copy of a handed-over
    document, not into the caller's objects (whose next write is made on them)."""
    url = f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(url) as store, StateStore(url) as other:
        await store.create("t", {"items": [{"n": 0, "tags": []}], "step": 0})
        doc: Any = (await store.get("t")).data  # type: ignore[union-attr]
        for ops in OPS[:2]:
            doc = await _applied(store, "t", doc, ops)
        kept = copy.deepcopy(doc)
        await other.append(
            "t",
            "other",
            ops=[
                {"op": "add", "path": "/items/0/tags/-", "value": "from another writer"},
                {"op": "replace", "path": "/step", "value": 99},
            ],
        )
        seen = (await store.get("t")).data  # type: ignore[union-attr]  # (folds them)
        assert seen["step"] == 99 and seen["items"][0]["tags"][-1] == "from another writer"
        assert doc == kept
