"""``Codec.compressed_sealer``: the seal of a short body on a compressing codec without a
key, written out for the lean keyed append (h/lgwrite2) — the very record
:meth:`Codec.seal` makes, field by field (payload, checksum, link; compressed or stored
raw as ``seal`` decides), read back verified by a codec of the same options; no sealer
where it could not be."""

from __future__ import annotations

import os

import pytest

from statekeeper.codec import Codec
from statekeeper.codec.pipeline import BLAKE3_FROM
from statekeeper.errors import IntegrityError
from statekeeper.security import Keyring, generate_key

_JSON = (
    b'{"ops":[{"op":"replace","path":"/ns//cp","value":{"h":["1f1f11d5-f20f-6afe",'
    b'"2026-12-06T02:33:07.753842+00:00",null],"v":2,"cv":{"n":2,"__start__":1}}}]}'
)


def _bodies() -> list[bytes]:
    random = os.urandom(300)  # (does not compress: stored raw by seal)
    return [
        b"",
        b"{}",
        _JSON[:63],  # (below the codec's compress_min_bytes of 64)
        _JSON[:64],
        _JSON,
        _JSON * 20,
        random,
        (_JSON * 100)[: BLAKE3_FROM - 1],
    ]


@pytest.mark.parametrize("compression", ["zstd", "zstd-dict"])
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("checksum", [None, "auto", "sha256"])
def test_the_sealer_makes_the_record_seal_makes(
    compression: str, fmt: str, checksum: str | None
) -> None:
    codec = Codec(compression=compression, format=fmt, checksum=checksum, compress_min_bytes=64)
    sealer = codec.compressed_sealer()
    assert sealer is not None
    prev = bytes(range(32))
    kinds = set()
    for body in _bodies():
        payload, checksum_bytes, link = sealer("agent-1", 7, "lg.cp", 1234.5, body, prev)
        sealed = codec.seal("agent-1", 7, "lg.cp", 1234.5, body, prev)
        assert (payload, checksum_bytes, link) == tuple(sealed), len(body)
        opened = Codec(
            compression=compression, format=fmt, checksum=checksum, compress_min_bytes=64
        ).open("agent-1", 7, "lg.cp", 1234.5, payload, checksum_bytes)
        assert (opened.body, opened.prev, opened.link) == (body, prev, link)
        kinds.add((payload[1] >> 2) & 3)  # (the header's compression bits)
        with pytest.raises(IntegrityError):  # (bound to its identity: another seq fails)
            codec.open("agent-1", 8, "lg.cp", 1234.5, payload, checksum_bytes)
    assert kinds == {0, 1 if compression == "zstd" else 2}  # (raw and compressed both made)


@pytest.mark.parametrize(
    "options",
    [
        {"compression": None},
        {"compression": "zstd-dict", "checksum": "blake3"},
        {"compression": "zstd-dict", "keyring": Keyring({"k": generate_key()})},
    ],
    ids=["plain", "blake3", "keyed"],
)
def test_no_sealer_for_a_codec_that_does_not_compress_hashes_otherwise_or_encrypts(
    options: dict[str, object],
) -> None:
    assert Codec(**options).compressed_sealer() is None  # type: ignore[arg-type]


def test_the_saver_codec_seals_the_same_bytes_on_every_thread() -> None:
    import threading

    codec = Codec(compression="zstd-dict", compress_min_bytes=64)
    sealer = codec.compressed_sealer()
    assert sealer is not None
    made: dict[str, tuple[bytes, bytes, bytes]] = {}

    def seal(name: str) -> None:
        made[name] = sealer("a", 2, "lg.cp", 1.0, _JSON, bytes(32))

    threads = [threading.Thread(target=seal, args=(f"t{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = tuple(codec.seal("a", 2, "lg.cp", 1.0, _JSON, bytes(32)))
    assert set(made.values()) == {expected}
