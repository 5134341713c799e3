"""A proof that a chat's old messages are unchanged (``store/proofs.py``, by version tags
with ``native/stamps.c``) describes what was packed: another thread that edits or
appends a message right after the flat save packed the list, before the save made its
proof, must not leave a proof that holds for the edited list with the bytes of the list
before the edit (every later save would then keep the old bytes: the edit never
stored, the cache's state and the stored one apart).

A thread switch right after the pack is made deterministic here with a profile hook on
the packer's return (``sys.setprofile``: the point where the GIL can pass to another
thread)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import proofs
from statekeeper.store.change import fast_packer


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "ai", "content": f"message {i}", "n": i}


@pytest.fixture(params=["native", "pure"])
def either(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Proofs made for every list, by version tags (when built) or by the pure proof."""
    monkeypatch.setattr(proofs, "PROOF_FROM", 0)
    if request.param == "pure":
        for name in ("make", "holds", "grown", "extend", "seal"):
            monkeypatch.setattr(proofs, name, getattr(proofs, f"pure_{name}"))
    elif not proofs.NATIVE:
        pytest.skip("the version tags' extension is not built here (or STATEKEEPER_PURE)")
    return str(request.param)


@pytest.fixture
def after_pack(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """``edits``: each call appended runs once, when the flat save's packer next returns
    a list's bytes (as another thread would, the GIL passed to it there)."""
    found = fast_packer()
    if found is None:
        pytest.skip("no ormsgpack: no proofs")
    packb = found[0]
    edits: list[Callable[[], None]] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and arg is packb and edits:
            edits.pop(0)()

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield edits
    finally:
        sys.setprofile(previous)


async def _check(url: str, store: StateStore, msgs: list[dict[str, Any]]) -> None:
    assert (await store.load("a")).data == {"messages": msgs}  # (its cache)
    async with StateStore(url) as fresh:
        assert (await fresh.load("a")).data == {"messages": msgs}


async def test_an_edit_after_the_whole_list_was_packed_is_saved_later(
    tmp_path: Path, either: str, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})  # (a create: the general path)
        msgs.append(_msg(3))
        after_pack.append(lambda: msgs[0].__setitem__("content", "edited"))
        await store.save("a", {"messages": msgs})  # packs the list, makes its proof
        assert not after_pack  # (the edit ran: right after the pack)
        for i in (4, 5):
            msgs.append(_msg(i))
            await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)


async def test_an_edit_of_a_new_message_after_its_pack_is_saved_later(
    tmp_path: Path, either: str, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        msgs.append(_msg(3))
        await store.save("a", {"messages": msgs})  # the proof made
        msgs.append(_msg(4))
        after_pack.append(lambda: msgs[4].__setitem__("content", "edited"))
        await store.save("a", {"messages": msgs})  # proven: packs only the new message
        assert not after_pack
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)


async def test_a_message_appended_after_the_new_ones_were_packed_is_saved(
    tmp_path: Path, either: str, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        msgs.append(_msg(3))
        await store.save("a", {"messages": msgs})
        msgs.append(_msg(4))
        after_pack.append(lambda: msgs.append(_msg(50)))
        await store.save("a", {"messages": msgs})
        assert not after_pack
        async with StateStore(url) as fresh:  # (the save stored messages 0-4)
            stored = (await fresh.load("a")).data
        assert stored == {"messages": msgs[:5]}
        assert (await store.load("a")).data == stored  # (its cache: the same)
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)


async def test_a_message_appended_after_the_whole_list_was_packed_is_saved(
    tmp_path: Path, either: str, after_pack: list[Callable[[], None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        msgs.append(_msg(3))
        after_pack.append(lambda: msgs.append(_msg(50)))
        await store.save("a", {"messages": msgs})
        assert not after_pack
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)


@pytest.fixture
def around_pack(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Callable[[], None]]]]:
    """``{"call": edits, "return": edits}``: each edit runs once, right before (after)
    the flat save's packer runs on a list, as another thread would (the GIL passes
    between the proof's stamp and the pack, and after the pack)."""
    found = fast_packer()
    if found is None:
        pytest.skip("no ormsgpack: no proofs")
    packb = found[0]
    edits: dict[str, list[Callable[[], None]]] = {"call": [], "return": []}

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if arg is packb and event in ("c_call", "c_return"):
            todo = edits[event[2:]]
            if todo:
                todo.pop(0)()

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield edits
    finally:
        sys.setprofile(previous)


async def test_a_message_swapped_out_before_the_pack_and_back_later_is_saved(
    tmp_path: Path, either: str, around_pack: dict[str, list[Callable[[], None]]]
) -> None:
    """Another thread replaces a new message between the proof's stamp and the pack (the
    bytes carry the replacement), then puts the stamped one back: the stamped dict, its
    tag unchanged, must not prove the bytes of the replacement (was: every later save
    kept them, the message put back never stored)."""
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        stamped = _msg(3)
        msgs.append(stamped)
        around_pack["call"].append(lambda: msgs.__setitem__(3, _msg(30)))
        await store.save("a", {"messages": msgs})  # stamps message 3, packs message 30
        assert not around_pack["call"]
        msgs[3] = stamped  # (back: the very dict, its tag unchanged)
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)
        msgs.append(_msg(5))
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)


async def test_a_message_swapped_after_the_pack_is_saved_as_packed_then_later(
    tmp_path: Path, either: str, around_pack: dict[str, list[Callable[[], None]]]
) -> None:
    """Another thread replaces a new message right after the pack: the event stores what
    the cached bytes hold (was: the event carried the replacement, re-read from the list,
    the cache the bytes of the packed one), and the next save stores the replacement."""
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        msgs.append(_msg(3))
        around_pack["return"].append(lambda: msgs.__setitem__(3, _msg(30)))
        await store.save("a", {"messages": msgs})
        assert not around_pack["return"]
        async with StateStore(url) as fresh:
            stored = (await fresh.load("a")).data
        assert (await store.load("a")).data == stored  # (the cache: what is stored)
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)
        msgs[3] = _msg(3)
        await store.save("a", {"messages": msgs})
        await _check(url, store, msgs)
