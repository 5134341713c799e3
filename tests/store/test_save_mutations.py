"""What a save stores, whatever the caller does to its objects between saves: they may be
mutated in place, replaced, shrunk or reused, and the state loaded after N saves (cached
or folded from storage) is the last state saved. And the lone SQLite append binds its
blobs without ``sqlite3``'s adapter lookup."""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend

from .test_properties import strict

AGENT = "agent"

LEAF = st.one_of(
    st.text(max_size=3),
    st.none(),
    st.sampled_from([0, 1, 1.0, True, False, "1", "True"]),
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "ai"]), "content": st.text(max_size=4)}
)
ITEM = st.one_of(
    st.text(max_size=4),
    MESSAGE,
    MESSAGE,
    MESSAGE,
    st.dictionaries(st.sampled_from(["a", "b", "c"]), LEAF, max_size=3),
    st.fixed_dictionaries({"calls": st.lists(st.text(max_size=2), max_size=2)}),
)
#: what the caller does to its document between two saves (in place, mostly)
MUTATION = st.one_of(
    st.tuples(st.just("append"), ITEM),
    st.tuples(st.just("append"), ITEM),
    st.tuples(st.just("append"), ITEM),
    st.tuples(st.just("reuse"), st.integers(0, 50)),  # append an item already in the list
    st.tuples(st.just("replace"), st.integers(0, 50), ITEM),
    st.tuples(st.just("set"), st.integers(0, 50), st.sampled_from(["role", "content", "a"]), LEAF),
    st.tuples(st.just("nested"), st.integers(0, 50), st.text(max_size=2)),  # calls.append
    st.tuples(st.just("pop"), st.integers(0, 50)),
    st.tuples(st.just("insert0"), ITEM),
    st.tuples(st.just("clear")),
    st.tuples(st.just("copy")),  # a new list object with the same items
    st.tuples(st.just("fresh")),  # a new list of copies of the items
    st.tuples(st.just("other"), LEAF),  # another top-level key
    st.tuples(st.just("drop_other")),
    st.tuples(st.just("none")),  # saved again unchanged
)

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def mutate(doc: dict[str, Any], step: tuple[Any, ...]) -> None:
    msgs: list[Any] = doc["messages"]
    kind = step[0]
    if kind == "append":
        msgs.append(copy.deepcopy(step[1]))
    elif kind == "reuse" and msgs:
        msgs.append(msgs[step[1] % len(msgs)])
    elif kind == "replace" and msgs:
        msgs[step[1] % len(msgs)] = copy.deepcopy(step[2])
    elif kind == "set" and msgs:
        item = msgs[step[1] % len(msgs)]
        if type(item) is dict:
            item[step[2]] = step[3]
    elif kind == "nested" and msgs:
        item = msgs[step[1] % len(msgs)]
        if type(item) is dict and type(item.get("calls")) is list:
            item["calls"].append(step[2])
    elif kind == "pop" and msgs:
        msgs.pop(step[1] % len(msgs))
    elif kind == "insert0":
        msgs.insert(0, copy.deepcopy(step[1]))
    elif kind == "clear":
        msgs.clear()
    elif kind == "copy":
        doc["messages"] = list(msgs)
    elif kind == "fresh":
        doc["messages"] = copy.deepcopy(msgs)
    elif kind == "other":
        doc["other"] = step[1]
    elif kind == "drop_other":
        doc.pop("other", None)


async def check_sequence(url: Any, steps: list[tuple[Any, ...]], first: list[Any]) -> None:
    """Save the caller's document after every mutation; the cached load and a fresh
    store's load always give the state as saved (a deep copy taken at the save)."""
    doc: dict[str, Any] = {"messages": copy.deepcopy(first)}
    async with StateStore(url) as store:
        await store.save(AGENT, doc)
        saved = copy.deepcopy(doc)
        for step in steps:
            mutate(doc, step)
            await store.save(AGENT, doc)
            saved = copy.deepcopy(doc)
            assert strict((await store.load(AGENT)).data, saved)
        async with StateStore(url) as fresh:  # folded from storage, no cache
            assert strict((await fresh.load(AGENT)).data, saved)
            assert (await fresh.verify()).ok


class Reusable(MemoryBackend):
    """A memory backend that survives ``close()`` (a second store reads it)."""

    async def close(self) -> None:
        return None


@SETTINGS
@given(first=st.lists(ITEM, max_size=4), steps=st.lists(MUTATION, min_size=1, max_size=20))
def test_in_place_mutations_on_memory(first: list[Any], steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(check_sequence(Reusable(), steps, first))


@settings(SETTINGS, max_examples=30)
@given(first=st.lists(ITEM, max_size=4), steps=st.lists(MUTATION, min_size=1, max_size=20))
def test_in_place_mutations_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, first: list[Any], steps: list[tuple[Any, ...]]
) -> None:
    path: Path = tmp_path_factory.mktemp("shadow") / "s.db"
    asyncio.run(check_sequence(f"sqlite:///{path}?synchronous=OFF", steps, first))


@pytest.mark.parametrize(
    "mutation",
    [
        lambda msgs: msgs[0].__setitem__("content", "edited"),  # an old item, in place
        lambda msgs: msgs[0].__setitem__("content", 1),  # a str becomes an int
        lambda msgs: msgs.__setitem__(1, {"role": "user", "content": "swapped"}),
        lambda msgs: msgs.pop(),  # shrunk
        lambda msgs: msgs[2]["calls"].append("x"),  # nested list, in place
        lambda msgs: msgs[2].__setitem__("n", True),  # a key added in place
    ],
)
def test_a_change_to_an_old_item_is_saved(mutation: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        msgs: list[Any] = [
            {"role": "user", "content": "a"},
            {"role": "ai", "content": "b"},
            {"role": "ai", "calls": ["t"]},
        ]
        url = f"sqlite:///{tmp_path / 'm.db'}?synchronous=OFF"
        async with StateStore(url) as store:
            for _ in range(3):  # the list grows: its shadow is kept
                msgs.append({"role": "user", "content": "more"})
                await store.save(AGENT, {"messages": msgs})
            mutation(msgs)
            msgs.append({"role": "user", "content": "last"})
            await store.save(AGENT, {"messages": msgs})
            assert strict((await store.load(AGENT)).data, {"messages": msgs})
        async with StateStore(url) as fresh:
            assert strict((await fresh.load(AGENT)).data, {"messages": msgs})

    asyncio.run(scenario())


def test_a_lone_append_binds_no_bytes_through_sqlite3_adapters(tmp_path: Path) -> None:
    """The lone append binds its blobs as ``bytearray``: ``sqlite3`` looks every
    ``bytes`` parameter up in its adapters first (~2.5k instructions each)."""
    seen: list[int] = []
    key = (bytes, sqlite3.PrepareProtocol)

    def adapt(value: bytes) -> bytes:
        seen.append(len(value))
        return value

    async def scenario() -> None:
        url = f"sqlite:///{tmp_path / 'b.db'}?synchronous=OFF"
        async with StateStore(url) as store:
            await store.save(AGENT, {"messages": ["a"]})
            await store.save(AGENT, {"messages": ["a", "b"]})  # cached: append_next
            seen.clear()
            for i in range(5):
                await store.save(AGENT, {"messages": ["a", "b", str(i)]})
            assert seen == []
        async with StateStore(url) as fresh:
            assert (await fresh.load(AGENT)).data == {"messages": ["a", "b", "4"]}
            assert (await fresh.verify()).ok

    assert key not in sqlite3.adapters
    sqlite3.register_adapter(bytes, adapt)  # (this test's own, removed below)
    try:
        asyncio.run(scenario())
    finally:
        del sqlite3.adapters[key]
