"""A replayed run of plain appends is decoded in one pass over the run (one parse of all
its values), with the same documents, link and errors as record by record
(``Codec.decode_chain(..., appends=True)``; docs/benchmarks.md, "cold11")."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec import ZERO_LINK, Codec, appends, pipeline
from statekeeper.errors import IntegrityError
from statekeeper.records import EventRow, event_rows

MESSAGES = [{"role": "user", "content": f'message {i} ],[ "q" ' + "é " * 40} for i in range(40)]


async def _chat(tmp_path: Path, n: int, paths: int = 1) -> tuple[Codec, list[EventRow]]:
    async with StateStore(
        f"sqlite:///{tmp_path / 'run.db'}?synchronous=OFF", snapshot_every=1000, witness=False
    ) as store:
        doc: dict[str, Any] = {f"m{p}": [] for p in range(paths)}
        for i in range(n):
            doc = {**doc, f"m{i % paths}": [*doc[f"m{i % paths}"], MESSAGES[i]]}
            await store.save("chat", doc)
        return store.codec, event_rows(await store.backend.read("chat", 0, None))


def _one_by_one(codec: Codec, events: list[EventRow]) -> tuple[list[Any], bytes | None]:
    docs: list[Any] = []
    link: bytes | None = ZERO_LINK
    for event in events:
        got, link, _, error = codec.decode_chain("chat", [event], link, appends=True)
        assert error is None
        docs.extend(got)
    return docs, link


def _forged(codec: Codec, after: EventRow, link: bytes, body: bytes) -> EventRow:
    """A record after ``after`` with ``body`` and a checksum that verifies (no key)."""
    seq, record_type, ts = after[0] + 1, after[1], after[2] + 1
    payload = pipeline._SHA_JSON + link + body
    names = pipeline._names("chat", record_type)
    checksum = hashlib.sha256(
        b"sk-link/1" + names + pipeline._seq_ts.pack(seq, ts) + payload
    ).digest()
    return (seq, record_type, ts, payload, checksum)


@pytest.mark.parametrize("paths", [1, 2])
async def test_a_run_of_appends_is_parsed_once_with_the_same_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paths: int
) -> None:
    codec, events = await _chat(tmp_path, 30, paths)
    expected, last = _one_by_one(codec, events)
    first = expected_link(codec, events)
    calls: list[int] = []
    loads = pipeline._orjson_loads

    def counting(data: Any) -> Any:
        calls.append(1)
        return loads(data)

    monkeypatch.setattr(appends, "_orjson_loads", counting)  # (where _append_run reads it)
    docs, link, typed, error = codec.decode_chain("chat", events[1:], first, appends=True)
    assert error is None and not typed
    assert docs == expected[1:] and link == last
    assert len(calls) == 1  # one parse of the 29 appended values


def expected_link(codec: Codec, events: list[EventRow]) -> bytes:
    return codec.decode_chain("chat", events[:1], ZERO_LINK)[1]  # type: ignore[return-value]


async def test_a_damaged_record_in_a_run_is_named_as_before(tmp_path: Path) -> None:
    codec, events = await _chat(tmp_path, 20)
    link = expected_link(codec, events)
    seq, record_type, ts, payload, checksum = events[10]
    damaged = payload[:-10] + bytes([payload[-10] ^ 1]) + payload[-9:]
    run = [*events[1:10], (seq, record_type, ts, damaged, checksum), *events[11:]]
    docs, _, _, error = codec.decode_chain("chat", run, link, appends=True)
    assert isinstance(error, IntegrityError) and error.seq == 11
    assert len(docs) == 9


@pytest.mark.parametrize(
    "values",
    [
        [b"1,2"],  # two values in one record
        [b'"x', b'y"'],  # a string running into the next record
        [b"[[0", b"1]]"],  # brackets running into the next record
    ],
)
async def test_a_verified_record_whose_value_is_not_one_json_value_is_refused(
    tmp_path: Path, values: list[bytes]
) -> None:
    codec, events = await _chat(tmp_path, 10)
    link = codec.decode_chain("chat", events, ZERO_LINK)[1]
    assert link is not None
    run = list(events[1:])
    for value in values:
        body = b'{"ops":[{"op":"add","path":"/m0/-","value":' + value + b"}]}"
        forged = _forged(codec, run[-1], link, body)
        link = forged[4]
        run.append(forged)
    docs, _, _, error = codec.decode_chain("chat", run, expected_link(codec, events), appends=True)
    assert isinstance(error, IntegrityError) and error.seq == 11
    assert "unreadable" in str(error)
    assert len(docs) == 9
