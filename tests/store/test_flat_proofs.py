"""A steady save of a history of large flat messages packs only the new messages: the
old ones are proven unchanged by identity (``store/proofs.py``), and whatever the caller
does to its objects between saves, the state loaded is the state saved.

Before, every save packed the whole history to prove that it only grew (O(bytes of the
history): 300 messages of 4,000 characters, ~1 ms a save)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.store import flat, proofs
from statekeeper.store.change import fast_packer

from .test_properties import strict
from .test_save_mutations import (
    ITEM,
    MUTATION,
    SETTINGS,
    Reusable,
    check_sequence,
)

BIG = 3000  # characters of a message: above proofs.PROOF_FROM packed


@pytest.fixture
def packed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of items of every list the flat save packs, in order."""
    sizes: list[int] = []
    found = fast_packer()
    assert found is not None
    packb, options = found

    def counting(value: Any, default: Any, opts: int) -> bytes:
        if type(value) is list:
            sizes.append(len(value))
        return bytes(packb(value, default, opts))

    monkeypatch.setattr(flat, "fast_packer", lambda: (counting, options))
    return sizes


def _message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "ai", "content": f"{i:05d}" + "x" * BIG, "n": i}


async def test_a_steady_save_of_large_messages_packs_only_the_new_one(
    tmp_path: Path, packed: list[int]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_message(i) for i in range(5)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})  # (a create: the general path)
        for i in range(5, 15):
            msgs.append(_message(i))
            await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
    # the first update packs the whole list (and makes the proof); every later save
    # packs the one new message (before: the whole list, 7..15 items, every save)
    assert packed[-9:] == [1] * 9, packed
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"messages": msgs})


EDITS = [
    lambda msgs: msgs[0].__setitem__("content", "edited"),  # an old item, in place
    lambda msgs: msgs[0].__setitem__("n", True),  # 0 -> True: equal, not the same
    lambda msgs: msgs[1].__setitem__("n", 1.0),  # 1 -> 1.0
    lambda msgs: msgs[1].__delitem__("n"),  # a key removed
    lambda msgs: msgs[1].update(extra=None),  # a key added
    lambda msgs: msgs.__setitem__(1, dict(msgs[1])),  # an equal copy in its place
    lambda msgs: msgs.reverse(),
    lambda msgs: msgs.pop(0),
    lambda msgs: msgs[2].__setitem__("content", ["now", "a", "list"]),  # not flat
    lambda msgs: msgs[2].__setitem__("role", msgs[2].pop("role")),  # key order
]


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_an_old_large_message_changed_in_place_is_saved(
    tmp_path: Path, edit: Any, durability: str
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_message(i) for i in range(4)]
    async with StateStore(url, durability=durability) as store:
        for i in range(4, 8):  # proven from the second update on
            msgs.append(_message(i))
            await store.save("a", {"messages": msgs})
        edit(msgs)
        msgs.append(_message(99))
        await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
        msgs.append(_message(100))  # and the save after it
        await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"messages": msgs})


@pytest.fixture
def always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proofs made for every list, whatever the size of its items."""
    monkeypatch.setattr(proofs, "PROOF_FROM", 0)


@SETTINGS
@given(first=st.lists(ITEM, max_size=4), steps=st.lists(MUTATION, min_size=1, max_size=20))
def test_in_place_mutations_with_proofs_on_memory(
    always: None, first: list[Any], steps: list[tuple[Any, ...]]
) -> None:
    asyncio.run(check_sequence(Reusable(), steps, first))


@SETTINGS
@given(first=st.lists(ITEM, max_size=4), steps=st.lists(MUTATION, min_size=1, max_size=20))
def test_in_place_mutations_with_proofs_on_sqlite(
    always: None,
    tmp_path_factory: pytest.TempPathFactory,
    first: list[Any],
    steps: list[tuple[Any, ...]],
) -> None:
    path: Path = tmp_path_factory.mktemp("proofs") / "s.db"
    asyncio.run(check_sequence(f"sqlite:///{path}?synchronous=OFF", steps, first))


SMALL = 300  # characters of a chat message: below the pure proof's PROOF_FROM packed


def _small(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "ai", "content": f"{i:05d}" + "y" * SMALL}


async def test_a_steady_save_of_small_messages_packs_only_the_new_one(
    tmp_path: Path, packed: list[int]
) -> None:
    """With the version tags (``store/_stamps``, native/stamps.c) a chat of
    300-character messages is proven too: before, every save packed its whole history
    (the pure proof costs more than the pack below kilobyte items)."""
    if not proofs.NATIVE:  # (not built, or STATEKEEPER_PURE=1: the pure proof)
        pytest.skip("the version tags' extension is not in use here")
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=NORMAL"
    msgs = [_small(i) for i in range(5)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        for i in range(5, 25):
            msgs.append(_small(i))
            await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
    assert packed[-19:] == [1] * 19, packed
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"messages": msgs})


@pytest.fixture(params=["native", "pure"])
def either(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Proofs made for every list, by version tags (when built) or by the pure proof."""
    monkeypatch.setattr(proofs, "PROOF_FROM", 0)
    if request.param == "pure":  # (seal too: the native seal refuses a pure proof)
        for name in ("make", "holds", "grown", "extend", "seal"):
            monkeypatch.setattr(proofs, name, getattr(proofs, f"pure_{name}"))
    elif not proofs.NATIVE:
        pytest.skip("the version tags' extension is not built here (or STATEKEEPER_PURE)")
    return str(request.param)


@pytest.mark.parametrize("edit", EDITS)
async def test_an_old_small_message_changed_in_place_is_saved(
    tmp_path: Path, edit: Any, either: str
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=NORMAL"
    msgs = [_small(i) for i in range(4)]
    for i, msg in enumerate(msgs):
        msg["n"] = i
    async with StateStore(url) as store:
        for i in range(4, 8):  # proven from the second update on
            msgs.append(_small(i))
            await store.save("a", {"messages": msgs})
        edit(msgs)
        msgs.append(_small(99))
        await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
        msgs.append(_small(100))
        await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"messages": msgs})


@SETTINGS
@given(first=st.lists(ITEM, max_size=4), steps=st.lists(MUTATION, min_size=1, max_size=20))
def test_in_place_mutations_with_pure_proofs_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory,
    first: list[Any],
    steps: list[tuple[Any, ...]],
) -> None:
    path: Path = tmp_path_factory.mktemp("pure") / "s.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(proofs, "PROOF_FROM", 0)
        for name in ("make", "holds", "grown", "extend", "seal"):
            mp.setattr(proofs, name, getattr(proofs, f"pure_{name}"))
        asyncio.run(check_sequence(f"sqlite:///{path}?synchronous=OFF", steps, first))
