"""``follow_chain``: a stream's events opened and its chain followed in one call, with
the same results and the same errors as :meth:`Codec.open` of each event and the
chain check a restore made around it."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.codec import ZERO_LINK, Codec
from statekeeper.codec.chaincheck import follow_chain
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.pipeline import CHAIN_BROKEN
from statekeeper.errors import AgentForgotten, IntegrityError, StatekeeperError
from statekeeper.security import Keyring, generate_key

K1, K2 = generate_key(), generate_key()
Row = tuple[int, str, float, bytes, bytes]


def codecs() -> dict[str, Codec]:
    return {
        "plain": Codec(),
        "plain-zstd": Codec(compression="zstd", compress_min_bytes=0),
        "plain-blake3": Codec(checksum="blake3"),
        "keyed": Codec(keyring=Keyring({"k1": K1, "k2": K2}, active="k1")),
        "keyed-zstd-msgpack": Codec(
            keyring=Keyring({"k1": K1}), compression="zstd", compress_min_bytes=0, format="msgpack"
        ),
        "data-keys": Codec(keyring=Keyring({"k1": K1}, data_keys=MemoryKeyVault())),
    }


def stream(codec: Codec, agent_id: str, n: int, prev: bytes = ZERO_LINK) -> list[Row]:
    """``n`` events of ``agent_id`` sealed in a chain (two record types, mixed)."""
    rows: list[Row] = []
    for seq in range(1, n + 1):
        kind = "patch" if seq % 3 else "note"
        body = b'{"step":%d,"text":"%s"}' % (seq, b"x" * (seq * 7))
        sealed = codec.seal(agent_id, seq, kind, 1000.0 + seq, body, prev)
        rows.append((seq, kind, 1000.0 + seq, sealed.payload, sealed.checksum))
        prev = sealed.link
    return rows


def one_by_one(codec: Codec, agent_id: str, rows: list[Row], link: bytes, mark: int | None) -> Any:
    """What a restore did before: ``open`` each event, then check its ``prev``."""
    at = None
    for seq, kind, ts, payload, checksum in rows:
        opened = codec.open(agent_id, seq, kind, ts, payload, checksum)
        if opened.prev is not None and opened.prev != link:
            raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
        link = opened.link
        if seq == mark:
            at = link
    return link, at


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except StatekeeperError as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("name", list(codecs()))
def test_it_returns_the_links_open_returns(name: str) -> None:
    codec = codecs()[name]
    known: dict[bytes, Any] = {}  # kept across streams, as a restore keeps it
    for agent in ("t0/a", "t0/b", "t1/c"):
        rows = stream(codec, agent, 9)
        expected = one_by_one(codec, agent, rows, ZERO_LINK, 6)
        assert follow_chain(codec, agent, rows, ZERO_LINK, 6, known) == expected
        # a part that continues a stream (an incremental) starts at its link
        more = stream(codec, agent, 3, expected[0])
        assert follow_chain(codec, agent, more, expected[0], None, known) == one_by_one(
            codec, agent, more, expected[0], None
        )


def edits(codec: Codec, agent: str) -> dict[str, list[Row]]:
    """Streams of 8 events, each edited at its 5th (a record after the first of its
    header: opened without ``open`` unless it fails)."""
    good = stream(codec, agent, 8)
    seq, kind, ts, payload, checksum = good[4]
    flipped = payload[:-3] + bytes([payload[-3] ^ 1]) + payload[-2:]
    rechained = codec.seal(agent, seq, kind, ts, b'{"step":5}', b"\x07" * 32)
    other = stream(codec, "t9/other", 8)[4]

    def fifth(*rows: Any) -> list[Row]:
        return [*good[:4], *rows, *good[5:]]

    return {
        "a flipped byte": fifth((seq, kind, ts, flipped, checksum)),
        "another checksum": fifth((seq, kind, ts, payload, good[3][4])),
        "another seq": fifth((seq + 1, kind, ts, payload, checksum)),
        "another type": fifth((seq, kind + "x", ts, payload, checksum)),
        "another time": fifth((seq, kind, ts + 1, payload, checksum)),
        "another agent's record": fifth(other),
        "a valid record with another prev": fifth(
            (seq, kind, ts, rechained.payload, rechained.checksum)
        ),
        "a record dropped": fifth(),
        "two records swapped": [*good[:4], good[5], good[4], *good[6:]],
        "truncated": fifth((seq, kind, ts, payload[:20], checksum)),
        "not bytes": fifth((seq, kind, ts, payload.decode("latin-1"), checksum)),
    }


@pytest.mark.parametrize("name", list(codecs()))
def test_every_edit_fails_as_open_and_the_chain_check_fail(name: str) -> None:
    codec = codecs()[name]
    agent = "t0/a"
    for what, rows in edits(codec, agent).items():
        known: dict[bytes, Any] = {}
        expected = outcome(one_by_one, codec, agent, rows, ZERO_LINK, None)
        assert isinstance(expected, tuple) and isinstance(expected[0], type), (name, what)
        assert outcome(follow_chain, codec, agent, rows, ZERO_LINK, None, known) == expected, (
            name,
            what,
        )
        # and the same when the stream's header is known already (a later stream)
        stream_ok = stream(codec, "t3/ok", 2)
        follow_chain(codec, "t3/ok", stream_ok, ZERO_LINK, None, known)
        assert outcome(follow_chain, codec, agent, rows, ZERO_LINK, None, known) == expected


def test_a_valid_record_that_does_not_follow_is_a_broken_chain() -> None:
    """The one edit only the chain check finds: each record verifies on its own."""
    codec = codecs()["keyed"]
    rows = edits(codec, "t0/a")["a valid record with another prev"]
    with pytest.raises(IntegrityError) as caught:
        follow_chain(codec, "t0/a", rows, ZERO_LINK)
    assert CHAIN_BROKEN in str(caught.value) and caught.value.seq == 5
    # the stream started from another link: broken at its first record
    with pytest.raises(IntegrityError, match="chain broken"):
        follow_chain(codec, "t0/a", stream(codec, "t0/a", 3), b"\x01" * 32)


def test_a_forgotten_agent_raises_agent_forgotten() -> None:
    keys = Keyring({"k1": K1}, data_keys=MemoryKeyVault())
    codec = Codec(keyring=keys)
    known: dict[bytes, Any] = {}
    rows = stream(codec, "t0/a", 4)
    follow_chain(codec, "t0/a", rows, ZERO_LINK, None, known)
    keys.forget("t0/a")
    with pytest.raises(AgentForgotten):
        follow_chain(codec, "t0/a", rows, ZERO_LINK, None, known)


def test_the_records_after_the_first_of_a_header_are_opened_without_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes it cheaper: one ``open`` for the first record of each key header in
    all the streams checked with one ``known``, not one per record."""
    codec = codecs()["keyed"]
    streams = {f"t0/a{i}": stream(codec, f"t0/a{i}", 5) for i in range(20)}
    calls: list[tuple[Any, ...]] = []
    real = codec.open

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(codec, "open", counted)
    known: dict[bytes, Any] = {}
    for agent, rows in streams.items():
        follow_chain(codec, agent, rows, ZERO_LINK, None, known)
    assert len(calls) == 1
