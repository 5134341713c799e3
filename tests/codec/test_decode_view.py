"""``Codec.decode_view``: a record stored as its canonical plaintext decoded without
copying its body — the same document, links and typedness as ``decode_typed``, the
same refusals, and None for a record it does not take (a key, compression)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from statekeeper.codec import Codec
from statekeeper.errors import IntegrityError
from statekeeper.security import Keyring, generate_key

PLAIN = {"fsm": None, "v": 1, "data": {"messages": [{"c": "x" * 300, "n": i} for i in range(30)]}}
#: a float whose packed bytes hold a ``$`` (0x24): not a typed value
DOLLAR = {"data": {"f": 3.000000000000009, "s": "a $t b"}}
TYPED = {"data": {"at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)}}


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("checksum", ["sha256", "blake3", "auto"])
@pytest.mark.parametrize("doc", [PLAIN, DOLLAR, TYPED], ids=["plain", "dollar", "typed"])
def test_the_view_decodes_as_decode_typed_does(fmt: str, checksum: str, doc: Any) -> None:
    codec = Codec(format=fmt, checksum=checksum)
    sealed = codec.encode("a", 7, "snapshot", 2.5, doc)
    expected, opened, typed = codec.decode_typed(
        "a", 7, "snapshot", 2.5, sealed.payload, sealed.checksum
    )
    viewed = codec.decode_view("a", 7, "snapshot", 2.5, sealed.payload, sealed.checksum)
    assert viewed is not None
    got, prev, link, got_fmt, got_typed = viewed
    assert got == expected == doc
    assert (prev, link, got_fmt, got_typed) == (opened.prev, opened.link, opened.format, typed)
    assert got_typed is (doc is TYPED)
    assert type(prev) is bytes and type(link) is bytes


@pytest.mark.parametrize("checksum", ["sha256", "blake3"])
def test_a_changed_byte_is_refused_at_its_seq(checksum: str) -> None:
    codec = Codec(checksum=checksum)
    sealed = codec.encode("a", 7, "snapshot", 2.5, PLAIN)
    for at in (1, 3, 40, len(sealed.payload) - 1):  # header, link, body
        changed = bytearray(sealed.payload)
        changed[at] ^= 0x01
        with pytest.raises(IntegrityError) as err:
            result = codec.decode_view("a", 7, "snapshot", 2.5, bytes(changed), sealed.checksum)
            if result is None:  # (a header it does not take: the general decode says why)
                codec.decode_typed("a", 7, "snapshot", 2.5, bytes(changed), sealed.checksum)
        assert err.value.seq == 7
    with pytest.raises(IntegrityError):  # another agent's, seq's or time's record
        codec.decode_view("b", 7, "snapshot", 2.5, sealed.payload, sealed.checksum)
    with pytest.raises(IntegrityError):
        codec.decode_view("a", 8, "snapshot", 2.5, sealed.payload, sealed.checksum)
    with pytest.raises(IntegrityError):
        codec.decode_view("a", 7, "snapshot", 2.6, sealed.payload, sealed.checksum)


def test_a_body_that_verifies_but_does_not_parse_is_unreadable() -> None:
    codec = Codec(checksum="sha256")
    sealed = codec.seal("a", 1, "snapshot", 1.0, b'{"data": ')  # sealed: it verifies
    with pytest.raises(IntegrityError, match="unreadable") as err:
        codec.decode_view("a", 1, "snapshot", 1.0, sealed.payload, sealed.checksum)
    assert err.value.seq == 1


@pytest.mark.parametrize(
    "codec",
    [
        Codec(compression="zstd", compress_min_bytes=0),
        Codec(keyring=Keyring({"k1": generate_key()}, active="k1")),
    ],
    ids=["zstd", "keyed"],
)
def test_records_it_does_not_take_answer_none(codec: Codec) -> None:
    sealed = codec.encode("a", 1, "snapshot", 1.0, PLAIN)
    assert codec.decode_view("a", 1, "snapshot", 1.0, sealed.payload, sealed.checksum) is None
    assert codec.decode("a", 1, "snapshot", 1.0, sealed.payload, sealed.checksum)[0] == PLAIN
