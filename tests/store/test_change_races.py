"""The general save's change detection (``store/change.py``: a save the flat save hands
back, here because a dict value changed) packs every top-level value, caches those
bytes for the next save, and builds the ops: another thread that appends to or edits a
value right after it was packed must not make ops that differ from the bytes cached (a
message stored twice, or an edit stored but not cached: loads from this store and from
a new one apart for good).

As in ``test_proof_races.py``, the thread switch right after the pack is made
deterministic with a profile hook on the packer's return in :func:`change.dump_keys`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import change
from statekeeper.store.change import fast_packer


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "ai", "content": f"message {i}", "n": i}


@pytest.fixture
def after_pack(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """``edits``: each call appended runs once, when ``dump_keys``'s packer next returns
    a value's bytes (as another thread would, the GIL passed to it there)."""
    found = fast_packer()
    if found is None:
        pytest.skip("no ormsgpack")
    packb = found[0]
    code = change.dump_keys.__code__
    edits: list[Callable[[], None]] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and arg is packb and edits and frame.f_code is code:
            edits.pop(0)()

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield edits
    finally:
        sys.setprofile(previous)


async def _check(url: str, store: StateStore, data: dict[str, Any]) -> None:
    assert (await store.load("a")).data == data  # (its cache)
    async with StateStore(url) as fresh:
        assert (await fresh.load("a")).data == data


async def test_a_message_appended_after_the_grown_list_was_packed(
    tmp_path: Path, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs, "meta": {"turn": 0}})
        await store.save("a", {"messages": msgs, "meta": {"turn": 1}})
        msgs.append(_msg(3))
        after_pack.append(lambda: msgs.append(_msg(50)))
        await store.save("a", {"messages": msgs, "meta": {"turn": 2}})
        assert not after_pack  # (the append ran: right after the pack)
        async with StateStore(url) as fresh:  # (the save stored messages 0-3)
            stored = (await fresh.load("a")).data
        assert stored == {"messages": msgs[:4], "meta": {"turn": 2}}
        assert (await store.load("a")).data == stored  # (its cache: the same)
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs, "meta": {"turn": 3}})
        await _check(url, store, {"messages": msgs, "meta": {"turn": 3}})


async def test_a_changed_value_edited_after_its_pack(
    tmp_path: Path, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}?synchronous=OFF"
    meta: dict[str, Any] = {"turn": 0, "tags": ["a"]}
    async with StateStore(url) as store:
        await store.save("a", {"meta": meta, "messages": [_msg(0)]})
        await store.save("a", {"meta": meta, "messages": [_msg(0)]})
        meta["turn"] = 1
        after_pack.append(lambda: meta.__setitem__("turn", 2))
        await store.save("a", {"meta": meta, "messages": [_msg(0)]})
        assert not after_pack
        async with StateStore(url) as fresh:
            stored = (await fresh.load("a")).data
        assert (await store.load("a")).data == stored  # (its cache: what was stored)
        meta["tags"].append("b")
        await store.save("a", {"meta": meta, "messages": [_msg(0)]})
        await _check(url, store, {"meta": meta, "messages": [_msg(0)]})


async def test_a_list_added_and_appended_after_its_pack(
    tmp_path: Path, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"meta": {"turn": 0}})
        await store.save("a", {"meta": {"turn": 1}})
        after_pack.append(lambda: None)  # (meta's pack)
        after_pack.append(lambda: msgs.append(_msg(50)))
        await store.save("a", {"meta": {"turn": 2}, "messages": msgs})  # a key added
        assert not after_pack
        msgs.append(_msg(5))
        await store.save("a", {"meta": {"turn": 3}, "messages": msgs})
        await _check(url, store, {"meta": {"turn": 3}, "messages": msgs})


async def test_a_value_appended_at_a_create_after_its_pack(
    tmp_path: Path, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        after_pack.append(lambda: msgs.append(_msg(50)))
        await store.save("a", {"messages": msgs, "meta": {"turn": 0}})
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs, "meta": {"turn": 1}})
        await _check(url, store, {"messages": msgs, "meta": {"turn": 1}})
