"""An old message of a growing history edited in place into a value Python calls equal
but that is stored as another value is written, on every path a steady save takes (the
flat save on SQLite, ``save_fast`` on memory, group commit).

Before, a registered ``StrEnum``/``IntEnum`` member put in place of the plain value it
equals was taken for unchanged (``patch._same`` proved "same" by orjson bytes, and
orjson writes an enum member as its value): the save succeeded, the old plain value was
stored, and a load gave back ``"user"`` where the caller had ``Role.USER``; an
unregistered one was saved the same way, where the same document with the member at
the top level is refused (``SerializationError``).

The others (``True``/``1``, ``1``/``1.0``, ``0.0``/``-0.0``, an object equal to
everything) are the trap of the cheap change proofs a save could use instead of packing
the whole history (docs/benchmarks.md, "perf-steady"): comparing the old items with
copies kept from the last save by ``==``. Each must be saved (or refused with a typed
error, nothing stored), never kept as the old value and loaded back silently."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import SerializationError

from .test_properties import strict


class Role(enum.StrEnum):
    USER = "user"


class Level(enum.IntEnum):
    ONE = 1


class Unregistered(enum.StrEnum):
    USER = "user"


TYPES = [Role, Level]


class Agreeable:
    """Equal to everything; not JSON."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


#: (the old item's field as first saved, what it is edited into in place)
EDITS: list[tuple[str, Any, Any]] = [
    ("flag", True, 1),
    ("flag", 1, True),
    ("n", 1, 1.0),
    ("n", 0.0, -0.0),
    ("content", "user", Role.USER),
    ("n", 1, Level.ONE),
]


def _history(field: str, old: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"m{i}", field: old} for i in range(3)]


async def _grow_then_edit(store: StateStore, field: str, old: Any, new: Any) -> list[Any]:
    msgs = _history(field, old)
    for i in range(4):  # a steady history: each save appends one message
        msgs.append({"role": "ai", "content": f"r{i}"})
        await store.save("a", {"messages": msgs})
    msgs[1][field] = new  # an old item, in place (same dict, same list)
    msgs.append({"role": "user", "content": "last"})
    await store.save("a", {"messages": msgs})
    return msgs


def _same(loaded: Any, expected: Any) -> bool:
    """As stored: equal as JSON, and a typed value given back as its type."""
    return strict(loaded, expected) and repr(loaded) == repr(expected)


@pytest.mark.parametrize(("field", "old", "new"), EDITS)
@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_an_old_item_edited_into_an_equal_value_is_saved_on_sqlite(
    tmp_path: Path, field: str, old: Any, new: Any, durability: str
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}?synchronous=OFF"
    async with StateStore(url, durability=durability, types=TYPES) as store:
        msgs = await _grow_then_edit(store, field, old, new)
        assert _same((await store.load("a")).data["messages"], msgs)
    async with StateStore(url, types=TYPES) as fresh:  # as stored, not as cached
        assert _same((await fresh.load("a")).data["messages"], msgs)


@pytest.mark.parametrize(("field", "old", "new"), EDITS)
async def test_an_old_item_edited_into_an_equal_value_is_saved_on_memory(
    field: str, old: Any, new: Any
) -> None:
    async with StateStore(MemoryBackend(), types=TYPES) as store:
        msgs = await _grow_then_edit(store, field, old, new)
        assert _same((await store.load("a")).data["messages"], msgs)


@pytest.mark.parametrize("value", [Unregistered.USER, Agreeable()], ids=["enum", "agreeable"])
async def test_an_old_item_edited_into_a_value_the_codec_cannot_store_is_refused(
    tmp_path: Path, value: Any
) -> None:
    """As the same value at the top level is: ``SerializationError``, naming where it
    is, and what was stored stays as it was (before: an unregistered enum member equal
    to the old value was "saved" and the old value kept)."""
    url = f"sqlite:///{tmp_path / 'x.db'}?synchronous=OFF"
    async with StateStore(url) as store:
        msgs = _history("content", "user")
        for i in range(4):
            msgs.append({"role": "ai", "content": f"r{i}"})
            await store.save("a", {"messages": msgs})
        before = [dict(m) for m in msgs]
        msgs[1]["content"] = value
        msgs.append({"role": "user", "content": "last"})
        with pytest.raises(SerializationError, match="messages"):
            await store.save("a", {"messages": msgs})
        with pytest.raises(SerializationError):
            await store.save("b", {"content": value})
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data["messages"], before)


@pytest.mark.parametrize(("field", "old", "new"), EDITS)
async def test_an_old_item_of_a_durable_agent_edited_into_an_equal_value_is_saved(
    tmp_path: Path, field: str, old: Any, new: Any
) -> None:
    """The tracked ``agent.data`` diffs the edited item against the document written
    last: the same proof, the same fix (before: ``Role.USER`` and ``Level.ONE`` were
    stored as ``"user"`` and ``1``)."""
    url = f"sqlite:///{tmp_path / 'x.db'}?synchronous=OFF"
    async with StateStore(url, types=TYPES) as store:
        agent = await store.agent("a")
        agent.data["messages"] = _history(field, old)
        await agent.save()
        agent.data["messages"][1][field] = new
        agent.data["messages"].append({"role": "user", "content": "last"})
        await agent.save()
        expected = [dict(m) for m in agent.data["messages"]]
    async with StateStore(url, types=TYPES) as fresh:
        assert _same((await fresh.load("a")).data["messages"], expected)
