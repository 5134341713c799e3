"""The save after a cold load takes the fast path (issue 11).

A state folded from storage (never saved by this store) had no bytes of its top-level
values kept (``AgentRecord.dumped``), so its next save went the general way: the JSON
of the state parsed again, the whole document diffed, ``WritePipeline.write`` and a
request appended. Its bytes are now made when the load hands the state's objects to
the caller (``ReadPath.public``) or at that save (``change.kept_bytes``), and the save
is made by the flat save / ``save_fast`` — storing exactly what the general path
stores, byte for byte."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore

from ..conftest import FakeClock
from .test_save_fast import Calls, stored


def chat(n: int) -> dict[str, Any]:
    return {
        "task": "summarise",
        "step": n,
        "messages": [{"role": "user", "content": f"message {i} " + "x" * 40} for i in range(n)],
    }


async def _source(path: Path, saves: int, snapshot_every: int, snapshot: bool) -> None:
    """``saves`` saves of agent "a" (and a snapshot of its head taken by a store that
    never held its bytes: a JSON snapshot, when ``snapshot``)."""
    async with StateStore(
        f"sqlite:///{path}", clock=FakeClock(step=1.0), snapshot_every=snapshot_every
    ) as store:
        for n in range(1, saves + 1):
            await store.save("a", chat(n))
    if snapshot:
        async with StateStore(f"sqlite:///{path}", clock=FakeClock(step=1.0)) as store:
            await store.snapshot("a")


#: (saves, snapshot_every, a JSON snapshot at the head): where the cold load starts
LAYOUTS = {
    "events only": (3, 100, False),
    "a snapshot of packed bytes at the head": (4, 4, False),
    "a JSON snapshot at the head": (3, 100, True),
    "events after a snapshot": (6, 4, False),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
async def test_the_save_after_a_cold_load_is_fast_and_stores_what_the_general_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    saves, every, snapshot = LAYOUTS[layout]
    await _source(tmp_path / "source.db", saves, every, snapshot)
    nxt = chat(saves + 1)
    calls = Calls(monkeypatch)
    for name, fast in (("fast.db", True), ("general.db", False)):
        shutil.copyfile(tmp_path / "source.db", tmp_path / name)
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(start=5_000.0), snapshot_every=every
        ) as store:
            await store.save("other", {"n": 0})  # (a store's first write checks its file)
            loaded = await store.load("a")  # cold: folded from the file, verified
            assert loaded.data == chat(saves)
            loaded.data["messages"].clear()  # (the caller's copy: nothing of the store's)
            store._writes.fast = fast  # (False: the general path, as with options)
            before = (calls.write, calls.fast)
            await store.save("a", nxt)
            if fast:
                assert (calls.write, calls.fast) == (before[0], before[1] + 1)
                # and the one after it too
                await store.save("a", chat(saves + 2))
                assert (calls.write, calls.fast) == (before[0], before[1] + 2)
            else:
                await store.save("a", chat(saves + 2))
            assert (await store.load("a")).data == chat(saves + 2)
            assert (await store.verify()).ok
    assert await stored(tmp_path / "fast.db") == await stored(tmp_path / "general.db")
    async with StateStore(f"sqlite:///{tmp_path}/fast.db") as again:
        assert (await again.load("a")).data == chat(saves + 2)


@pytest.mark.parametrize(
    "doc",
    [
        {"when": datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC), "messages": ["m"]},
        {"nested": {"deep": [1, {"x": None}]}, "s": "é", "f": 1.5, "messages": ["m"]},
    ],
    ids=["a typed value", "nested values"],
)
async def test_the_save_after_a_cold_load_of_any_plain_state_stores_what_the_general_path_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]
) -> None:
    """A state with typed values (``rich``) keeps no bytes: its save goes the general
    way, as before; any state is stored the same either way."""
    async with StateStore(f"sqlite:///{tmp_path}/source.db", clock=FakeClock(step=1.0)) as store:
        await store.save("a", doc)
    changed = {**doc, "messages": ["m", "n"], "added": True}
    for name, fast in (("fast.db", True), ("general.db", False)):
        shutil.copyfile(tmp_path / "source.db", tmp_path / name)
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(start=5_000.0)
        ) as store:
            await store.save("other", {"n": 0})
            assert (await store.load("a")).data == doc
            store._writes.fast = fast
            await store.save("a", changed)
            assert (await store.load("a")).data == changed
            assert (await store.verify()).ok
    assert await stored(tmp_path / "fast.db") == await stored(tmp_path / "general.db")
