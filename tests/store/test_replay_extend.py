"""A replayed run of events that each append one value to the same list (a chat's saves)
is verified and applied with no Python step per event: ``Codec.decode_appends`` checks
every record (checksum, chain link, shape) in one pass over the run and the fold extends
the list once (``state.extend_list``; docs/benchmarks.md, "coldk"). What does not fit
goes the record-by-record way, with its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.codec import ZERO_LINK
from statekeeper.records import event_rows
from statekeeper.store import reads, state

from ._chats import MESSAGES, chat_url, flip_payload_byte, save_chat


def _url(tmp_path: Path) -> str:
    return chat_url(tmp_path, "extend.db")


async def _chat(url: str, n: int) -> None:
    await save_chat(url, n, snapshot_every=10)


async def test_a_cold_load_past_the_snapshot_extends_the_list_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)  # snapshot at 30, nine appends after it
    applied: list[int] = []
    apply_payloads = state.apply_payloads

    def counting(record: Any, rows: Any, docs: Any) -> None:
        applied.append(len(docs))
        apply_payloads(record, rows, docs)

    monkeypatch.setattr(reads, "apply_payloads", counting)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:39]} and loaded.seq == 39
    assert applied == []  # (before: one apply_payloads of the nine, a step per event)
    async with StateStore(url, cache_size=8, witness=False) as cached:
        first = await cached.load("chat")
        assert first.data == {"messages": MESSAGES[:39]}
        await cached.save("chat", {"messages": MESSAGES[:40]})  # on the record folded so
    async with StateStore(url, cache_size=0, witness=False) as cold:
        again = await cold.load("chat")
        assert again.data == {"messages": MESSAGES[:40]} and again.seq == 40
        assert (await cold.verify(["chat"])).ok


async def test_decode_appends_verifies_the_run_as_decode_chain_does(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 12)
    async with StateStore(url, cache_size=0, witness=False) as store:
        codec = store.codec
        events = event_rows(await store.backend.read("chat", 0, None))
        first = codec.decode_chain("chat", events[:1], ZERO_LINK)[1]
        docs, last, _, error = codec.decode_chain("chat", events[1:], first, appends=True)
        assert error is None
        got = codec.decode_appends("chat", events[1:], first)
        assert got is not None
        pointer, values, link = got
        assert [(pointer, v) for v in values] == docs and link == last
        assert values == MESSAGES[1:12]
        # each of these is refused whole (the record-by-record decode names it)
        seq, kind, ts, payload, checksum = events[5]
        flipped = payload[:-6] + bytes([payload[-6] ^ 1]) + payload[-5:]
        damaged = [*events[1:5], (seq, kind, ts, flipped, checksum), *events[6:]]
        assert codec.decode_appends("chat", damaged, first) is None
        assert codec.decode_appends("chat", events[2:], first) is None  # (a link skipped)
        assert codec.decode_appends("chat", events[1:], bytes(32)) is None  # (another chain)


async def test_a_damaged_event_in_the_run_still_fails_the_load(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    flip_payload_byte(tmp_path / "extend.db", 35, from_end=6)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
        assert caught.value.seq == 35


async def test_one_event_past_the_snapshot_is_verified_and_appended_without_a_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load one event past its snapshot (a chat's head, one save after the snapshot or
    tail) decodes that event as a run of one: the same checks (header and chain link,
    checksum, shape, no typed value), no record-by-record decode and fold of it
    (docs/benchmarks.md, "cold11", 2026-12-05 afternoon). Before, a run of one always went through
    ``decode_chain`` and ``apply_payloads``."""
    url = _url(tmp_path)
    await _chat(url, 31)  # snapshot at 30, one append after it
    applied: list[int] = []
    apply_payloads = state.apply_payloads

    def counting(record: Any, rows: Any, docs: Any) -> None:
        applied.append(len(docs))
        apply_payloads(record, rows, docs)

    monkeypatch.setattr(reads, "apply_payloads", counting)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:31]} and loaded.seq == 31
        codec = cold.codec
        events = event_rows(await cold.backend.read("chat", 0, None))
        before = codec.decode_chain("chat", events[:30], ZERO_LINK)[1]
        docs, last, _, error = codec.decode_chain("chat", events[30:], before, appends=True)
        assert error is None and codec.decode_appends("chat", events[30:], before) == (
            docs[0][0],
            [docs[0][1]],
            last,
        )
        # refused whole (the record-by-record decode then names what is wrong)
        seq, kind, ts, payload, checksum = events[30]
        flipped = payload[:-6] + bytes([payload[-6] ^ 1]) + payload[-5:]
        assert codec.decode_appends("chat", [(seq, kind, ts, flipped, checksum)], before) is None
        assert (
            codec.decode_appends("chat", [(seq, kind, ts + 1.0, payload, checksum)], before) is None
        )
        assert (
            codec.decode_appends("chat", [(seq + 1, kind, ts, payload, checksum)], before) is None
        )
        assert codec.decode_appends("chat", events[30:], bytes(32)) is None  # (another chain)
        assert codec.decode_appends("chat", events[29:30], before) is None  # (a link skipped)
    assert applied == []


async def test_a_damaged_single_event_past_the_snapshot_still_fails_the_load(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    await _chat(url, 31)
    flip_payload_byte(tmp_path / "extend.db", 31, from_end=6)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
        assert caught.value.seq == 31


async def test_a_typed_value_in_a_single_event_is_folded_the_general_way(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    day = __import__("datetime").date(2026, 12, 5)
    async with StateStore(url, snapshot_every=10, witness=False) as store:
        for i in range(10):
            await store.save("chat", {"messages": MESSAGES[: i + 1]})
        await store.save("chat", {"messages": [*MESSAGES[:10], {"day": day}]})
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.seq == 11 and loaded.data["messages"][-1] == {"day": day}
