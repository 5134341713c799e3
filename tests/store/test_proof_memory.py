"""What the flat save's proofs (``store/proofs.py``) keep, and what they spare.

- By version tags (``native/stamps.c``) a proof keeps each old message's address and
  tag, no reference: a cached agent's proof no longer keeps the messages of its last
  save alive after the caller dropped them (the cache is bounded by count, not bytes:
  up to ``cache_size`` agents' chats held twice over, as packed bytes and as objects;
  ``benchmarks/bench_proof_memory.py``).
- Without references an address can be reused: a chat rebuilt by the caller at the
  freed messages' addresses is saved as it is, never taken for the old one.
- A list left unchanged keeps the proof made at the save that packed it: it is not
  packed again at every later save (before, its proof was made, dropped and made again
  before every pack)."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import flat, proofs
from statekeeper.store.change import fast_packer

from .test_properties import strict

PAD = "lorem ipsum dolor sit amet " * 11  # ~300 characters


def _msg(agent: int, i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "ai", "content": f"{agent}:{i} {PAD}", "n": i}


@pytest.fixture
def native() -> None:
    if not proofs.NATIVE:  # (not built, or STATEKEEPER_PURE=1: the pure proof)
        pytest.skip("the version tags' extension is not in use here")


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
def packed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of items of every list the flat save packs, in order."""
    sizes: list[int] = []
    found = fast_packer()
    if found is None:
        pytest.skip("no ormsgpack: no proofs")
    packb, options = found

    def counting(value: Any, default: Any, opts: int) -> bytes:
        if type(value) is list:
            sizes.append(len(value))
        return bytes(packb(value, default, opts))

    monkeypatch.setattr(flat, "fast_packer", lambda: (counting, options))
    return sizes


async def test_a_cached_agents_proof_keeps_none_of_its_messages_alive(
    tmp_path: Path, native: None
) -> None:
    msgs = [_msg(0, i) for i in range(20)]
    counts = [sys.getrefcount(m) for m in msgs]
    async with StateStore(f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF") as store:
        await store.save("a", {"messages": msgs})
        for i in range(20, 24):  # proven from the second update on
            msgs.append(_msg(0, i))
            await store.save("a", {"messages": msgs})
        record = store._cache.peek("a")
        assert record is not None and record.proofs  # (a proof is kept)
        gc.collect()
        # before: 1 more each, the proof's copy of the list (the last two: grown's too)
        assert [sys.getrefcount(m) for m in msgs][:20] == counts
        assert strict((await store.load("a")).data, {"messages": msgs})


async def test_what_proofs_hold_after_many_agents_is_bounded_by_their_count(
    tmp_path: Path, native: None
) -> None:
    """Agents' chats saved, then dropped by the caller: dropping every cached proof
    frees 16 bytes a message and the proofs' tuples, not the messages (before: ~600
    bytes a message, 1.6x what the cache holds as bytes)."""
    agents, messages = 30, 100
    tracing = tracemalloc.is_tracing()
    tracemalloc.start()  # (before the messages are made: it sees only what it traced)
    try:
        async with StateStore(f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF") as store:
            for a in range(agents):
                chat = [_msg(a, i) for i in range(messages - 3)]
                await store.save(f"a{a}", {"messages": chat})
                for _ in range(3):
                    chat.append(_msg(a, len(chat)))
                    await store.save(f"a{a}", {"messages": chat})
            del chat
            records = list(store._cache._data.values())
            assert sum(1 for r in records if r.proofs) == agents
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            for record in records:
                record.proofs = None
            gc.collect()
            freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        if not tracing:
            tracemalloc.stop()
    assert freed <= agents * (messages * 16 + 512), freed


async def test_a_chat_rebuilt_at_reused_addresses_is_saved(tmp_path: Path, either: str) -> None:
    """The caller drops its saved messages and builds others (CPython hands freed dicts
    out again, last freed first, so they take the old ones' addresses): the save stores
    the new messages, never proven unchanged by an address."""
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=OFF"
    msgs = [_msg(0, i) for i in range(6)]
    async with StateStore(url) as store:
        await store.save("a", {"messages": msgs})
        for i in range(6, 9):
            msgs.append(_msg(0, i))
            await store.save("a", {"messages": msgs})
        record = store._cache.peek("a")
        assert record is not None and record.proofs
        addresses = [id(m) for m in msgs]
        contents = [m["content"] for m in msgs]
        del msgs[:]
        # the same keys and the same content objects, other numbers: the same shape
        rebuilt = [{"role": "ai", "content": c, "n": -1} for c in reversed(contents)]
        rebuilt.append(_msg(0, 99))
        if either == "native":  # (the pure proof holds its items: none is freed)
            assert any(id(m) in addresses for m in rebuilt), "no address reused: untested"
        msgs = rebuilt
        await store.save("a", {"messages": msgs})
        assert strict((await store.load("a")).data, {"messages": msgs})
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"messages": msgs})


async def test_an_unchanged_list_keeps_its_proof_and_is_not_packed_again(
    tmp_path: Path, either: str, packed: list[int]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}?synchronous=NORMAL"
    facts = [{"fact": f"{i} {PAD}", "n": i} for i in range(30)]
    msgs = [_msg(0, i) for i in range(3)]
    async with StateStore(url) as store:
        await store.save("a", {"facts": facts, "messages": msgs})
        for i in range(3, 13):
            msgs.append(_msg(0, i))
            await store.save("a", {"facts": facts, "messages": msgs})
        assert strict((await store.load("a")).data, {"facts": facts, "messages": msgs})
        # the first update packs both lists (and proves them); later ones only the new
        # message (before: the 30 facts packed again at every save)
        assert 30 not in packed[2:], packed
        assert packed[-9:] == [1] * 9, packed
        facts[4]["n"] = "edited"  # an unchanged list edited at last: stored
        msgs.append(_msg(0, 13))
        await store.save("a", {"facts": facts, "messages": msgs})
        assert strict((await store.load("a")).data, {"facts": facts, "messages": msgs})
    async with StateStore(url) as fresh:
        assert strict((await fresh.load("a")).data, {"facts": facts, "messages": msgs})
