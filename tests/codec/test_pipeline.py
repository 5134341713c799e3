"""Stored records: sealed and opened exactly, bound to their identity, any change detected."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.codec import ZERO_LINK, Codec
from statekeeper.codec.pipeline import COMPRESS_ZSTD, legacy_checksum
from statekeeper.errors import (
    ConfigurationError,
    DecryptionError,
    IntegrityError,
    KeyNotFound,
    StatekeeperError,
)
from statekeeper.security import Keyring, generate_key

from .strategies import documents, registry, strict

K1, K2 = generate_key(), generate_key()


def ring(active: str = "k1", **keys: str) -> Keyring:
    return Keyring(keys or {"k1": K1, "k2": K2}, active=active)


def _with_vault() -> Keyring:
    from statekeeper.codec.datakeys import MemoryKeyVault

    return Keyring({"k1": K1, "k2": K2}, active="k1", data_keys=MemoryKeyVault())


CODECS = {
    "plain": lambda: Codec(types=registry()),
    "plain-zstd": lambda: Codec(types=registry(), compression="zstd", compress_min_bytes=0),
    "msgpack": lambda: Codec(types=registry(), format="msgpack"),
    "keyed": lambda: Codec(types=registry(), keyring=ring()),
    "keyed-zstd-msgpack": lambda: Codec(
        types=registry(),
        keyring=ring(),
        compression="zstd",
        compress_min_bytes=0,
        format="msgpack",
    ),
    # the built-in dictionary (flag value 2): the same guarantees, encrypted or not
    "plain-zstd-dict": lambda: Codec(
        types=registry(), compression="zstd-dict", compress_min_bytes=0
    ),
    "keyed-zstd-dict": lambda: Codec(
        types=registry(), keyring=ring(), compression="zstd-dict", compress_min_bytes=0
    ),
    # per-agent data keys (crypto-shredding): the same guarantees
    "data-keys": lambda: Codec(types=registry(), keyring=_with_vault()),
    # BLAKE3 links and checksums (header bit 6): the same guarantees in every layout
    "plain-blake3": lambda: Codec(types=registry(), checksum="blake3"),
    "msgpack-blake3": lambda: Codec(types=registry(), format="msgpack", checksum="blake3"),
    "plain-zstd-blake3": lambda: Codec(
        types=registry(), compression="zstd", compress_min_bytes=0, checksum="blake3"
    ),
    "keyed-zstd-blake3": lambda: Codec(
        types=registry(),
        keyring=ring(),
        compression="zstd",
        compress_min_bytes=0,
        checksum="blake3",
    ),
}
NAMES = list(CODECS)

IDENT = st.tuples(
    st.text(min_size=1, max_size=12),
    st.integers(1, 2**62),
    st.sampled_from(["patch", "created", "snapshot", "custom/kind"]),
    st.floats(allow_nan=False, allow_infinity=False),
)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150, deadline=None)
@given(doc=documents(), ident=IDENT, prev=st.binary(min_size=32, max_size=32))
def test_decode_encode_is_the_identity(name: str, doc: Any, ident: Any, prev: bytes) -> None:
    codec = CODECS[name]()
    agent, seq, kind, ts = ident
    sealed = codec.encode(agent, seq, kind, ts, doc, prev)
    back, opened = codec.decode(agent, seq, kind, ts, sealed.payload, sealed.checksum)
    assert strict(back) == strict(doc)
    assert opened.prev == prev and opened.link == sealed.link
    # the link does not depend on the key, the compression or the nonce
    again = Codec(types=registry(), format=codec.format.name, checksum=codec.checksum).encode(
        agent, seq, kind, ts, doc, prev
    )
    assert again.link == sealed.link


@pytest.mark.parametrize("name", ["keyed", "keyed-zstd-msgpack"])
@settings(max_examples=100, deadline=None)
@given(doc=documents(), ident=IDENT)
def test_encrypted_records_hide_their_content(name: str, doc: Any, ident: Any) -> None:
    codec = CODECS[name]()
    agent, seq, kind, ts = ident
    marker = {"secret": "MARKER-7f3a-do-not-leak", "doc": doc}
    sealed = codec.encode(agent, seq, kind, ts, marker)
    assert b"MARKER-7f3a" not in sealed.payload and b"MARKER-7f3a" not in sealed.checksum
    assert b"secret" not in sealed.payload
    # every encryption is fresh (random nonce)
    assert codec.encode(agent, seq, kind, ts, marker).payload != sealed.payload


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(doc=documents(), data=st.data())
def test_any_single_flipped_bit_is_detected(name: str, doc: Any, data: st.DataObject) -> None:
    codec = CODECS[name]()
    sealed = codec.encode("agent", 7, "patch", 1.5, {"d": doc}, ZERO_LINK)
    stored = bytearray(sealed.payload + sealed.checksum)
    bit = data.draw(st.integers(0, len(stored) * 8 - 1), label="bit")
    stored[bit // 8] ^= 1 << (bit % 8)
    payload, checksum = bytes(stored[: len(sealed.payload)]), bytes(stored[len(sealed.payload) :])
    with pytest.raises(IntegrityError):
        codec.decode("agent", 7, "patch", 1.5, payload, checksum)


@pytest.mark.parametrize("name", NAMES)
def test_every_bit_of_a_small_record_is_covered(name: str) -> None:
    codec = CODECS[name]()
    sealed = codec.encode("a", 1, "patch", 2.0, {"ops": [{"op": "add", "path": "/x", "value": 1}]})
    stored = sealed.payload + sealed.checksum
    for bit in range(len(stored) * 8):
        flipped = bytearray(stored)
        flipped[bit // 8] ^= 1 << (bit % 8)
        cut = len(sealed.payload)
        with pytest.raises(IntegrityError):
            codec.decode("a", 1, "patch", 2.0, bytes(flipped[:cut]), bytes(flipped[cut:]))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "other",
    [
        pytest.param(("b", 3, "patch", 1.0), id="other-agent"),
        pytest.param(("a", 4, "patch", 1.0), id="other-seq"),
        pytest.param(("a", 3, "transition", 1.0), id="other-kind"),
        pytest.param(("a", 3, "snapshot", 1.0), id="event-as-snapshot"),
        pytest.param(("a", 3, "patch", 1.0000001), id="other-time"),
    ],
)
def test_a_record_is_bound_to_its_identity(name: str, other: tuple[Any, ...]) -> None:
    codec = CODECS[name]()
    sealed = codec.encode("a", 3, "patch", 1.0, {"n": 1})
    with pytest.raises(IntegrityError):
        codec.decode(*other, sealed.payload, sealed.checksum)  # type: ignore[call-arg]


def test_truncated_and_empty_records() -> None:
    for name in NAMES:
        codec = CODECS[name]()
        sealed = codec.encode("a", 1, "patch", 1.0, {"n": 1})
        for cut in range(len(sealed.payload)):
            with pytest.raises(IntegrityError):
                codec.decode("a", 1, "patch", 1.0, sealed.payload[:cut], sealed.checksum)
        with pytest.raises(IntegrityError):
            codec.decode("a", 1, "patch", 1.0, sealed.payload, b"")


# -- keys ------------------------------------------------------------------------------


def test_older_keys_still_decrypt_and_new_records_use_the_active_key() -> None:
    old = Codec(keyring=ring("k1"))
    sealed_old = old.encode("a", 1, "patch", 1.0, {"n": 1})
    new = Codec(keyring=ring("k2"))
    sealed_new = new.encode("a", 2, "patch", 1.0, {"n": 2})
    assert Codec.header(sealed_old.payload).key_id == "k1"  # type: ignore[union-attr]
    assert Codec.header(sealed_new.payload).key_id == "k2"  # type: ignore[union-attr]
    assert new.decode("a", 1, "patch", 1.0, sealed_old.payload, sealed_old.checksum)[0] == {"n": 1}


def test_missing_key_names_the_key_id() -> None:
    sealed = Codec(keyring=ring("k2")).encode("a", 1, "patch", 1.0, {"n": 1})
    only_k1 = Codec(keyring=Keyring({"k1": K1}))
    with pytest.raises(KeyNotFound) as info:
        only_k1.decode("a", 1, "patch", 1.0, sealed.payload, sealed.checksum)
    assert info.value.key_id == "k2" and "'k2'" in str(info.value)
    assert (info.value.agent_id, info.value.seq) == ("a", 1)
    with pytest.raises(KeyNotFound):  # no keyring at all
        Codec().decode("a", 1, "patch", 1.0, sealed.payload, sealed.checksum)


def test_wrong_key_material_is_a_decryption_error_naming_the_key() -> None:
    sealed = Codec(keyring=Keyring({"k1": K1})).encode("a", 1, "patch", 1.0, {"n": 1})
    impostor = Codec(keyring=Keyring({"k1": K2}))
    with pytest.raises(DecryptionError) as info:
        impostor.decode("a", 1, "patch", 1.0, sealed.payload, sealed.checksum)
    assert info.value.key_id == "k1" and "wrong key" in str(info.value)
    assert isinstance(info.value, IntegrityError)


def test_an_encrypted_store_accepts_no_plaintext() -> None:
    keyed = Codec(keyring=ring())
    for plain in (
        Codec(),
        Codec(format="msgpack"),
        Codec(compression="zstd", compress_min_bytes=0),
    ):
        sealed = plain.encode("a", 1, "patch", 1.0, {"n": 1})
        with pytest.raises(IntegrityError, match="not encrypted"):
            keyed.decode("a", 1, "patch", 1.0, sealed.payload, sealed.checksum)
    v0 = orjson.dumps({"n": 1})
    with pytest.raises(IntegrityError, match="not encrypted"):
        keyed.decode("a", 1, "patch", 1.0, v0, legacy_checksum("a", 1, "patch", v0))
    # but the migrating reader used by rekey opens them
    assert keyed.migrating().decode("a", 1, "patch", 1.0, v0, legacy_checksum("a", 1, "patch", v0))[
        0
    ] == {"n": 1}


def test_key_material_never_appears_in_errors_or_reprs() -> None:
    codec = Codec(keyring=ring())
    sealed = codec.encode("a", 1, "patch", 1.0, {"n": 1})
    texts = [repr(codec), repr(codec.keyring), repr(codec.keyring.active)]  # type: ignore[union-attr]
    for bad in (sealed.payload[:-1] + b"x", sealed.payload[:20]):
        try:
            codec.decode("a", 1, "patch", 1.0, bad, sealed.checksum)
        except StatekeeperError as exc:
            texts.append(str(exc))
    for material in (K1, K2):
        assert not any(material in t for t in texts)


# -- compression, legacy records, heads ------------------------------------------------------


def test_compression_threshold_and_level() -> None:
    codec = Codec(compression="zstd", compress_min_bytes=200, compression_level=19)
    small = codec.encode("a", 1, "patch", 1.0, {"x": "y" * 50})
    big = codec.encode("a", 1, "patch", 1.0, {"x": "y" * 5000})
    assert Codec.header(small.payload).compression == 0  # type: ignore[union-attr]
    assert Codec.header(big.payload).compression == COMPRESS_ZSTD  # type: ignore[union-attr]
    assert len(big.payload) < 200
    incompressible = codec.encode("a", 1, "patch", 1.0, {"x": hashlib.sha512(b"x").hexdigest() * 2})
    back, _ = codec.decode("a", 1, "patch", 1.0, incompressible.payload, incompressible.checksum)
    assert back["x"].startswith(hashlib.sha512(b"x").hexdigest())


def test_version_0_records_still_load_without_a_key() -> None:
    v0 = orjson.dumps({"ops": [{"op": "add", "path": "/n", "value": 1}]})
    doc, opened = Codec().decode("a", 4, "patch", 9.0, v0, legacy_checksum("a", 4, "patch", v0))
    assert doc["ops"][0]["value"] == 1 and opened.version == 0 and opened.prev is None
    with pytest.raises(IntegrityError):
        Codec().decode(
            "a", 4, "patch", 9.0, v0.replace(b"1", b"2"), legacy_checksum("a", 4, "patch", v0)
        )


def test_converted_legacy_records_keep_their_link() -> None:
    v0 = orjson.dumps({"n": 1})
    link = legacy_checksum("a", 2, "patch", v0)
    sealed = Codec(keyring=ring()).seal("a", 2, "patch", 5.0, v0, legacy_link=True)
    assert sealed.link == link
    _, opened = Codec(keyring=ring()).decode("a", 2, "patch", 5.0, sealed.payload, sealed.checksum)
    assert opened.link == link and opened.prev is None


def test_head_tags() -> None:
    link = hashlib.sha256(b"x").digest()
    for codec in (Codec(), Codec(keyring=ring())):
        tag = codec.head_tag("a", 5, link)
        codec.check_head("a", 5, link, tag)
        bad: list[tuple[Any, ...]] = [
            ("a", 5, ZERO_LINK, tag),
            ("a", 5, link, tag[:-1] + bytes([tag[-1] ^ 1])),
            ("a", 5, link, tag[:5]),
        ]
        if codec.encrypted:  # (without a key the tag is the link, which names agent and seq)
            bad += [("a", 4, link, tag), ("b", 5, link, tag)]
        for args in bad:
            with pytest.raises(IntegrityError):
                codec.check_head(*args)
    keyed = Codec(keyring=ring())
    with pytest.raises(IntegrityError, match="not authenticated"):
        keyed.check_head("a", 5, link, None)
    with pytest.raises(IntegrityError, match="not authenticated"):
        keyed.check_head("a", 5, link, Codec().head_tag("a", 5, link))  # an unkeyed head
    Codec().check_head("a", 5, link, None)  # no key, no tag: a stream from before tags
    with pytest.raises(KeyNotFound):
        Codec(keyring=Keyring({"k9": K1})).check_head("a", 5, link, keyed.head_tag("a", 5, link))


# -- the built-in zstd dictionary (compression="zstd-dict", flag value 2) ----------------------

#: a record sealed with dictionary 1 (``Codec(compression="zstd-dict")``): the dictionary is
#: part of the stored format, so these bytes must open with every later version
_DICT1_BODY = (
    b'[{"op":"replace","path":"/ns//meta","value":{"source":"loop","step":3,"parents":{}}}]'
)
_DICT1_PAYLOAD = bytes.fromhex(
    "0108000000000000000000000000000000000000000000000000000000000000000000"
    "28b52ffd2055850000085d047c000c94b45064acdbbdfa5327"
)
_DICT1_CHECKSUM = bytes.fromhex("bc8ba7009fc1c874a5a5967a2ae1e777a6ef7a049fdca20212cad2d43eb75d5b")


def test_a_record_written_with_dictionary_1_opens_with_every_codec() -> None:
    for codec in (Codec(), Codec(compression="zstd"), Codec(compression="zstd-dict")):
        opened = codec.open("lg/t#0", 5, "lg.batch", 1.5, _DICT1_PAYLOAD, _DICT1_CHECKSUM)
        assert opened.body == _DICT1_BODY
    assert Codec.header(_DICT1_PAYLOAD).compression == 2  # type: ignore[union-attr]
    # the dictionary's bytes are pinned: another dictionary would not open old records
    from statekeeper.codec import zstd_dict

    assert zstd_dict.data() is not None  # verified against zstd_dict.SHA256 on load
    bad = bytearray(_DICT1_PAYLOAD)
    bad[-3] ^= 0x01
    with pytest.raises(IntegrityError):
        Codec().open("lg/t#0", 5, "lg.batch", 1.5, bytes(bad), _DICT1_CHECKSUM)


def test_the_dictionary_makes_small_json_patch_records_smaller() -> None:
    body = (
        b'[{"op":"replace","path":"/ns//cp","value":{"h":["1f1ee959-bb71-6b03-8001-460b53a67277",'
        b'"2026-12-02T21:16:15.520216+00:00","1f1ee959-bb5c-637c-8000-2de80ea36241"],"v":4,'
        b'"cv":{"__start__":2,"n":3,"branch:to:step":3},"vs":{"__input__":{},"__start__":'
        b'{"__start__":1},"step":{"branch:to:step":2}},"uc":["branch:to:step","n"]}},'
        b'{"op":"replace","path":"/ns//meta","value":{"source":"loop","step":1,"parents":{}}}]'
    )
    plain = Codec(compression="zstd", compress_min_bytes=0).seal("a", 1, "p", 1.0, body, bytes(32))
    with_dict = Codec(compression="zstd-dict", compress_min_bytes=0).seal(
        "a", 1, "p", 1.0, body, bytes(32)
    )
    assert len(with_dict.payload) < len(plain.payload) * 3 // 4
    assert plain.payload[1] & 0x0C == 0x04 and with_dict.payload[1] & 0x0C == 0x08
    # the link is the plaintext's: the same record whatever its compression
    assert with_dict.link == plain.link


def test_an_unknown_compression_value_is_an_invalid_header() -> None:
    sealed = Codec(compression="zstd-dict", compress_min_bytes=0).seal(
        "a", 1, "p", 1.0, _DICT1_BODY, bytes(32)
    )
    bad = bytes((sealed.payload[0], sealed.payload[1] | 0x0C)) + sealed.payload[2:]
    with pytest.raises(IntegrityError, match="invalid header"):
        Codec().open("a", 1, "p", 1.0, bad, sealed.checksum)
    with pytest.raises(ConfigurationError, match="zstd-dict"):
        Codec(compression="lz4")
