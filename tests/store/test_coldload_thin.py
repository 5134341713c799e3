"""Cold load, the thin paths (docs/benchmarks.md, "coldload2"): a load whose head is its
latest snapshot is read without the general fold (``ReadPath.at_snapshot``), and an
event that is one plain append to a list is replayed from its value alone
(``Codec.decode_chain(..., appends=True)``). Every record is still verified, and what
does not fit falls back to the general path with its errors and fallbacks."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.codec import Codec
from statekeeper.records import event_rows
from statekeeper.store.reads import ReadPath

from ._chats import MESSAGES, chat_url, delete_event, flip_payload_byte, save_chat


def _url(tmp_path: Path) -> str:
    return chat_url(tmp_path, "thin.db")


async def _chat(url: str, n: int, every: int = 10) -> None:
    await save_chat(url, n, snapshot_every=every)


async def test_a_load_at_a_snapshot_does_not_take_the_general_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _chat(url, 20)  # snapshots at 10 and 20: the head is a snapshot

    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(ReadPath, "fold", no_fold)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:20]} and loaded.seq == 20
        assert cold._reads.loads == 1
    async with StateStore(url, cache_size=8, witness=False) as cached:  # kept: the blob
        assert (await cached.load("chat")).data == {"messages": MESSAGES[:20]}
        assert (await cached.load("chat")).data == {"messages": MESSAGES[:20]}


async def test_a_damaged_snapshot_at_the_head_still_falls_back_to_a_replay(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    await _chat(url, 20)
    with closing(sqlite3.connect(tmp_path / "thin.db")) as conn:
        payload = conn.execute("SELECT payload FROM sk_snapshots WHERE seq = 20").fetchone()[0]
        bad = payload[:-5] + bytes([payload[-5] ^ 1]) + payload[-4:]
        conn.execute("UPDATE sk_snapshots SET payload = ? WHERE seq = 20", (bad,))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")  # from the snapshot at 10 and 10 events
    assert loaded.data == {"messages": MESSAGES[:20]} and loaded.seq == 20


async def test_a_head_tag_that_does_not_match_fails_the_thin_load_too(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 20)
    with closing(sqlite3.connect(tmp_path / "thin.db")) as conn:
        tag = conn.execute("SELECT head_tag FROM sk_agents").fetchone()[0]
        forged = tag[:-1] + bytes([tag[-1] ^ 1])
        conn.execute("UPDATE sk_agents SET head_tag = ?", (forged,))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError):
            await cold.load("chat")


async def test_plain_appends_are_decoded_as_their_value(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with StateStore(url, snapshot_every=100, witness=False) as store:
        for i in range(1, 5):
            await store.save("chat", {"messages": MESSAGES[:i]})
        await store.save("chat", {"messages": [*MESSAGES[:4], {"$t": "x"}]})  # typed-looking
        await store.save("chat", {"messages": MESSAGES[:4]}, fsm_state="done")  # not one add
        await store.save("chat", {"messages": MESSAGES[:5]})
        events = event_rows(await store.backend.read("chat", 0, None))
        codec: Codec = store.codec
    plain, link, _, error = codec.decode_chain("chat", events, None)
    docs, link2, _, error2 = codec.decode_chain("chat", events, None, appends=True)
    assert error is None and error2 is None and link == link2 and len(docs) == 7
    # the first event writes the whole document; 2..4 and 7 are one plain append each
    assert [type(d).__name__ for d in docs] == ["dict", *["tuple"] * 3, "dict", "dict", "tuple"]
    for whole, thin in zip(plain, docs, strict=True):
        if type(thin) is tuple:
            assert whole == {"ops": [{"op": "add", "path": thin[0], "value": thin[1]}]}
        else:
            assert whole == thin
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
    assert loaded.data == {"messages": MESSAGES[:5]} and loaded.fsm_state == "done"


async def test_a_tampered_append_still_fails_its_checksum(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 15)  # the snapshot at 10, appends 11..15 replayed
    with closing(sqlite3.connect(tmp_path / "thin.db")) as conn:
        payload = conn.execute("SELECT payload FROM sk_events WHERE seq = 13").fetchone()[0]
        at = payload.index(b"message 12")
        bad = payload[:at] + b"massage 12" + payload[at + 10 :]
        conn.execute("UPDATE sk_events SET payload = ? WHERE seq = 13", (bad,))
        conn.commit()
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
    assert caught.value.seq == 13


@pytest.mark.parametrize("past", [1, 3, 9])
async def test_a_load_a_few_events_past_the_snapshot_does_not_take_the_general_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, past: int
) -> None:
    url = _url(tmp_path)
    await _chat(url, 10 + past)  # the snapshot at 10, the head ``past`` events after it

    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(ReadPath, "fold", no_fold)
    n = 10 + past
    for size in (0, 8):  # (each store saves once more: the next one loads that head)
        async with StateStore(url, cache_size=size, witness=False) as cold:
            loaded = await cold.load("chat")
            assert loaded.data == {"messages": MESSAGES[:n]}
            assert loaded.seq == n and cold._reads.loads == 1
            await cold.save("chat", {"messages": MESSAGES[: n + 1]})  # on the record
            assert (await cold.load("chat")).data == {"messages": MESSAGES[: n + 1]}
        n += 1


async def test_a_damaged_event_past_the_snapshot_still_fails_the_thin_load(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    await _chat(url, 13)
    flip_payload_byte(tmp_path / "thin.db", 12)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as err:
            await cold.load("chat")
        assert err.value.seq == 12


async def test_a_stream_cut_after_the_snapshot_fails_the_thin_load(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 13)
    delete_event(tmp_path / "thin.db", 13, drop_trigger=True)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError):
            await cold.load("chat")
