"""A short run of replayed appends (a load 2..``FEW_APPENDS`` events past its snapshot:
past a tail snapshot, at most 7) is checked record by record (``_append_few``), not by
the passes over a run (``_append_run``), whose fixed cost was more than the records'
(docs/benchmarks.md, "cold3"): the same checks, the same answers, refused whole when
any record is not a verified plain append following the one before it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.codec import ZERO_LINK, decoding, pipeline
from statekeeper.records import EventRow, event_rows

from ._chats import MESSAGES, chat_url, flip_payload_byte, save_chat

#: run lengths either side of the switch from the loop to the passes
LENGTHS = (2, 3, 7, pipeline.FEW_APPENDS, pipeline.FEW_APPENDS + 1, 29)


def _flipped(row: EventRow) -> EventRow:
    seq, event_type, ts, payload, checksum = row
    return seq, event_type, ts, payload[:-6] + bytes([payload[-6] ^ 1]) + payload[-5:], checksum


async def _events(tmp_path: Path) -> list[EventRow]:
    url = chat_url(tmp_path, "few.db")
    await save_chat(url, 31, snapshot_every=100)
    async with StateStore(url, cache_size=0, witness=False) as store:
        return event_rows(await store.backend.read("chat", 0, None))


async def test_a_load_a_few_events_past_the_snapshot_skips_the_run_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = chat_url(tmp_path, "few.db")
    await save_chat(url, 33, snapshot_every=10)  # snapshot at 30, three appends after it
    passes: list[int] = []
    append_run = pipeline._append_run

    def counting(agent_id: str, events: Any, link: bytes) -> Any:
        passes.append(len(events))
        return append_run(agent_id, events, link)

    monkeypatch.setattr(decoding, "_append_run", counting)  # (where decode_chain reads it)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:33]} and loaded.seq == 33
        assert (await cold.verify(["chat"])).ok
    assert passes == []  # (before: one _append_run of the three)


@pytest.mark.parametrize("n", LENGTHS)
async def test_a_run_of_n_decodes_as_decode_chain_does(tmp_path: Path, n: int) -> None:
    events = await _events(tmp_path)
    async with StateStore(chat_url(tmp_path, "few.db"), witness=False) as store:
        codec = store.codec
        before = codec.decode_chain("chat", events[:1], ZERO_LINK)[1]
        run = events[1 : 1 + n]
        docs, last, _, error = codec.decode_chain("chat", run, before, appends=True)
        assert error is None
        got = codec.decode_appends("chat", run, before)
        assert got is not None
        pointer, values, link = got
        assert [(pointer, v) for v in values] == docs and link == last
        assert values == MESSAGES[1 : 1 + n]


@pytest.mark.parametrize("n", LENGTHS)
async def test_a_run_of_n_with_any_record_wrong_is_refused_whole(tmp_path: Path, n: int) -> None:
    events = await _events(tmp_path)
    async with StateStore(chat_url(tmp_path, "few.db"), witness=False) as store:
        codec = store.codec
        before = codec.decode_chain("chat", events[:1], ZERO_LINK)[1]
        run = events[1 : 1 + n]
        for i in {0, n // 2, n - 1}:
            seq, event_type, ts, payload, checksum = run[i]
            wrong: list[EventRow] = [
                _flipped(run[i]),  # a body byte
                (seq, event_type, ts + 1.0, payload, checksum),  # another time
                (seq + 1, event_type, ts, payload, checksum),  # another seq
                (seq, "other", ts, payload, checksum),  # another event type
                (seq, event_type, ts, payload, bytes(32)),  # another checksum
            ]
            for row in wrong:
                damaged = [*run[:i], row, *run[i + 1 :]]
                assert codec.decode_appends("chat", damaged, before) is None, (i, row[:3])
            if i < n - 1:  # (without its last record a run is a shorter run)
                skipped = [*run[:i], *run[i + 1 :]]
                assert codec.decode_appends("chat", skipped, before) is None  # (a link skipped)
        assert codec.decode_appends("chat", run, bytes(32)) is None  # (another chain)


async def test_a_damaged_event_in_a_short_run_still_fails_the_load(tmp_path: Path) -> None:
    url = chat_url(tmp_path, "few.db")
    await save_chat(url, 34, snapshot_every=10)  # snapshot at 30, four appends after it
    flip_payload_byte(tmp_path / "few.db", 33, from_end=6)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
        assert caught.value.seq == 33


@pytest.mark.parametrize(("every", "saves", "edited"), [(10, 33, 32), (16, 31, 25)])
async def test_an_event_whose_stored_type_was_changed_fails_the_load(
    tmp_path: Path, every: int, saves: int, edited: int
) -> None:
    """The event type is part of what each record's checksum binds: an edited type in a
    replayed run (3 events past the snapshot: the loop; 15: the passes) is refused at
    its seq. Before, the run was checked with the first record's type for every one
    and the load went through."""
    url = chat_url(tmp_path, "few.db")
    await save_chat(url, saves, snapshot_every=every)
    with closing(sqlite3.connect(tmp_path / "few.db")) as conn:
        conn.execute("UPDATE sk_events SET kind = 'transition' WHERE seq = ?", (edited,))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
        assert caught.value.seq == edited
