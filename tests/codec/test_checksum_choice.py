"""The record checksum algorithm is a codec choice recorded in each record's header:
SHA-256 records (every record written before the choice existed) verify unchanged,
BLAKE3 records verify, a changed BLAKE3 record is refused, and both mix in one chain."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import blake3
import pytest

from statekeeper.codec import ZERO_LINK, Codec
from statekeeper.errors import ConfigurationError, IntegrityError

DOC = {"messages": ["x" * 300] * 20}


def _link(hasher: Any, agent: str, kind: str, seq: int, ts: float, payload: bytes) -> bytes:
    """The documented link (pipeline.py: ``H("sk-link/1" ‖ identity ‖ canonical payload)``)."""
    ident = b"".join(
        struct.pack(">I", len(s)) + s for s in (agent.encode(), kind.encode())
    ) + struct.pack(">qd", seq, ts)
    digest: bytes = hasher(b"sk-link/1" + ident + payload).digest()
    return digest


def test_sha256_records_are_the_bytes_main_wrote() -> None:
    sealed = Codec(checksum="sha256").encode("a", 1, "patch", 1.0, DOC)
    assert sealed.payload[:3] == b"\x01\x00\x00"  # the header before the choice existed
    assert sealed.checksum == _link(hashlib.sha256, "a", "patch", 1, 1.0, sealed.payload)


def test_auto_hashes_large_records_with_blake3_and_small_ones_with_sha256() -> None:
    codec = Codec()  # the default: "auto"
    small = codec.encode("a", 1, "patch", 1.0, {"n": 1})
    assert small == Codec(checksum="sha256").encode("a", 1, "patch", 1.0, {"n": 1})
    large = codec.encode("a", 1, "snapshot", 1.0, DOC)  # > BLAKE3_FROM bytes
    assert large.payload[1] == 0x40
    assert large.checksum == _link(blake3.blake3, "a", "snapshot", 1, 1.0, large.payload)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_blake3_record_is_marked_hashed_with_blake3_and_verifies(fmt: str) -> None:
    codec = Codec(checksum="blake3", format=fmt)
    sealed = codec.encode("a", 1, "snapshot", 1.0, DOC)
    assert sealed.payload[1] & 0x40 and sealed.payload[2] == 0
    assert sealed.checksum == _link(blake3.blake3, "a", "snapshot", 1, 1.0, sealed.payload)
    for reader in (Codec(), Codec(checksum="blake3"), Codec(format="msgpack")):
        doc, opened = reader.decode("a", 1, "snapshot", 1.0, sealed.payload, sealed.checksum)
        assert doc == DOC and opened.algorithm == "blake3" and opened.link == sealed.link
    assert Codec.header(sealed.payload).algorithm == "blake3"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "options",
    [{}, {"compression": "zstd", "compress_min_bytes": 0}, {"format": "msgpack"}],
    ids=["plain", "zstd", "msgpack"],
)
def test_a_changed_blake3_record_is_refused(options: dict[str, object]) -> None:
    codec = Codec(checksum="blake3", **options)  # type: ignore[arg-type]
    sealed = codec.encode("a", 2, "patch", 1.0, DOC, b"\x07" * 32)
    body = bytearray(sealed.payload)
    body[-5] ^= 0x01  # one bit of the body
    with pytest.raises(IntegrityError):  # (a zstd frame: it may not decompress first)
        codec.decode("a", 2, "patch", 1.0, bytes(body), sealed.checksum)
    # the algorithm bit cleared: the record is read as SHA-256, which it is not
    downgraded = bytearray(sealed.payload)
    downgraded[1] &= ~0x40
    with pytest.raises(IntegrityError):
        codec.decode("a", 2, "patch", 1.0, bytes(downgraded), sealed.checksum)
    # a SHA-256 record marked BLAKE3 is refused the same way
    sha256 = Codec(checksum="sha256", **options)  # type: ignore[arg-type]
    plain = sha256.encode("a", 2, "patch", 1.0, DOC)
    upgraded = bytearray(plain.payload)
    upgraded[1] |= 0x40
    with pytest.raises(IntegrityError):
        codec.decode("a", 2, "patch", 1.0, bytes(upgraded), plain.checksum)


def test_sha256_and_blake3_records_mix_in_one_chain() -> None:
    writers = [Codec(), Codec(checksum="blake3"), Codec(checksum="blake3"), Codec()]
    link, rows = ZERO_LINK, []
    for seq, writer in enumerate(writers, 1):
        sealed = writer.encode("a", seq, "patch", float(seq), {"n": seq}, link)
        rows.append((seq, "patch", float(seq), sealed.payload, sealed.checksum))
        link = sealed.link
    for reader in (Codec(), Codec(checksum="blake3")):
        docs, last, _, error = reader.decode_chain("a", rows, ZERO_LINK)
        assert error is None and last == link
        assert docs == [{"n": n} for n in (1, 2, 3, 4)]
        prev = ZERO_LINK
        for row in rows:
            prev = reader.decode_next("a", *row, prev)[1]
        assert prev == link
    # a BLAKE3 record in the middle changed: the chain stops there
    changed = bytearray(rows[1][3])
    changed[-3] ^= 0x20
    broken = [rows[0], (*rows[1][:3], bytes(changed), rows[1][4]), *rows[2:]]
    docs, _, _, error = Codec().decode_chain("a", broken, ZERO_LINK)
    assert docs == [{"n": 1}] and isinstance(error, IntegrityError)


def test_an_encrypted_record_keeps_its_algorithm_when_resealed() -> None:
    from statekeeper.security import Keyring, generate_key

    ring = Keyring({"k1": generate_key()})
    plain = Codec(checksum="blake3").encode("a", 1, "patch", 1.0, DOC)
    opened = Codec().open("a", 1, "patch", 1.0, plain.payload, plain.checksum)
    # a SHA-256 codec with a key re-encrypts it (rekey) with the link unchanged
    again = Codec(keyring=ring).seal(
        "a", 1, "patch", 1.0, opened.body, opened.prev or ZERO_LINK, algorithm=opened.algorithm
    )
    assert again.link == plain.link
    back = Codec(keyring=ring).open("a", 1, "patch", 1.0, again.payload, again.checksum)
    assert back.algorithm == "blake3" and back.link == plain.link


def test_an_unknown_algorithm_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="checksum must be one of"):
        Codec(checksum="md5")
    with pytest.raises(ConfigurationError, match="algorithm must be one of"):
        Codec().seal("a", 1, "patch", 1.0, b"{}", algorithm="crc32")
