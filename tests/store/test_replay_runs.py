"""Replay of the events after a snapshot: verified in one codec call
(``Codec.decode_chain``), and a run of events that each append one value to the same
list applied as appends to that list, not as one patch per event. Every event is still
verified (chain + checksum), errors are raised in stream order, and any other change
between the appends is folded as before."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore, patch
from statekeeper.codec import Codec
from statekeeper.records import RawEvent, event_rows

from ._chats import MESSAGES, chat_url, save_chat


def _url(tmp_path: Path) -> str:
    return chat_url(tmp_path, "runs.db")


async def _chat(url: str, n: int) -> None:
    await save_chat(url, n, snapshot_every=100)


async def test_a_run_of_appends_is_not_patched_event_by_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _chat(url, 50)  # no snapshot: a cold load replays all 50 events
    calls: list[int] = []
    apply = patch.apply

    def counting(doc: Any, ops: Any, **kw: Any) -> Any:
        calls.append(len(ops))
        return apply(doc, ops, **kw)

    monkeypatch.setattr(patch, "apply", counting)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
    assert loaded.data == {"messages": MESSAGES[:50]} and loaded.seq == 50
    # the first event writes the document and the second appends through a patch
    # (which finds the list); the other 48 append to that list (on main: 50 patches)
    assert len(calls) <= 2


async def test_appends_between_other_changes_fold_as_saved(tmp_path: Path) -> None:
    url = _url(tmp_path)
    state: dict[str, Any] = {"messages": [], "log": []}
    saved: list[tuple[dict[str, Any], str | None]] = []
    steps: list[Any] = [
        *(("m", i) for i in range(5)),
        ("replace", 0),  # a message rewritten: the list is the same object...
        *(("m", i) for i in range(5, 8)),
        ("new-list", None),  # ... the list replaced by another one
        *(("m", i) for i in range(8, 11)),
        ("log", "a"),  # appends to another list between appends to this one
        ("m", 11),
        ("log", "b"),
        ("pop", None),
        ("m", 12),
        ("fsm", "busy"),
        ("m", 13),
        ("two", None),  # one event appending twice
        ("m", 14),
    ]
    async with StateStore(url, snapshot_every=100, witness=False) as store:
        fsm: str | None = None
        for kind, arg in steps:
            if kind == "m":
                state["messages"].append(MESSAGES[arg])
            elif kind == "replace":
                state["messages"][arg] = {"role": "system", "content": "rewritten"}
            elif kind == "new-list":
                state["messages"] = [{"role": "system", "content": "fresh"}]
            elif kind == "log":
                state["log"].append(arg)
            elif kind == "pop":
                state["messages"].pop()
            elif kind == "fsm":
                fsm = arg
            elif kind == "two":
                state["messages"] += [MESSAGES[40], MESSAGES[41]]
            await store.save("chat", state, fsm_state=fsm)
            saved.append((orjson_copy(state), fsm))
            async with StateStore(url, cache_size=0, witness=False) as cold:
                loaded = await cold.load("chat")
            assert (loaded.data, loaded.fsm_state) == saved[-1]
        # a cached state brought up to date event by event folds the same
        async with StateStore(url, witness=False) as warm:
            await warm.load("chat")
            state["messages"].append(MESSAGES[50])
            state["messages"].append(MESSAGES[51])
            await store.save("chat", state, fsm_state=fsm)
            assert (await warm.load("chat")).data == state


def orjson_copy(value: Any) -> Any:
    import orjson

    return orjson.loads(orjson.dumps(value))


def _tamper_checksum(db: Path, seq: int) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "UPDATE sk_events SET checksum = zeroblob(32) WHERE agent_id = 'chat' AND seq = ?",
            (seq,),
        )


async def test_every_replayed_event_is_verified_and_the_first_bad_one_named(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    await _chat(url, 40)
    _tamper_checksum(tmp_path / "runs.db", 33)
    _tamper_checksum(tmp_path / "runs.db", 21)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError) as caught:
            await cold.load("chat")
    assert caught.value.seq == 21 and "checksum" in str(caught.value)


async def test_decode_chain_stops_at_the_first_record_that_does_not_verify(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    await _chat(url, 6)
    async with StateStore(url, cache_size=0, witness=False) as store:
        events = event_rows(await store.backend.read("chat", 0, None))
        codec: Codec = store.codec
        docs, link, typed, error = codec.decode_chain("chat", events, None)
        assert error is None and len(docs) == 6 and link == events[-1][4]
        assert not typed and docs[1]["ops"][0]["path"] == "/messages/-"
        # a record that does not follow the one before: the chain is broken there
        docs, link, _, error = codec.decode_chain("chat", events[:2] + events[3:], None)
        assert len(docs) == 2 and link == events[1][4]
        assert isinstance(error, IntegrityError) and error.seq == 4
        # a record whose checksum does not match: named, the ones before returned
        bad = [*events]
        bad[4] = (*bad[4][:4], b"0" * 32)
        docs, _, _, error = codec.decode_chain("chat", bad, None)
        assert len(docs) == 4 and isinstance(error, IntegrityError) and error.seq == 5


async def test_a_cold_load_replays_the_engine_rows_without_an_event_object_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _chat(url, 50)  # no snapshot: a cold load replays all 50 events
    built: list[int] = []
    init = RawEvent.__init__

    def counting(self: RawEvent, *args: Any, **kw: Any) -> None:
        built.append(1)
        init(self, *args, **kw)

    monkeypatch.setattr(RawEvent, "__init__", counting)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("chat")
        assert loaded.data == {"messages": MESSAGES[:50]} and loaded.seq == 50
    # the SQLite cursor's rows go to the fold as they are (on main: one RawEvent per
    # event, a Python __init__ each, ~1 us of every replayed event)
    assert built == []
