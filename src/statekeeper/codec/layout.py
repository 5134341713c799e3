"""The layout of a stored record: its version, header flags and sizes, its
identity's encodings, and what sealing and opening it give (:class:`Sealed`,
:class:`Opened`, :class:`Header`). The format is described in
:mod:`statekeeper.codec.pipeline`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import orjson

if TYPE_CHECKING:
    pass


VERSION = 1
ZERO_LINK = bytes(32)
CHAIN_BROKEN = (
    "chain broken: the record does not follow the one before it (a record was removed,"
    " replaced or reordered, or it comes from another stream)"
)

COMPRESS_NONE = 0
COMPRESS_ZSTD = 1
COMPRESS_ZSTD_DICT = 2  # zstd with the built-in dictionary 1 (zstd_dict.py)
_COMPRESSIONS = {
    None: COMPRESS_NONE,
    "none": COMPRESS_NONE,
    "zstd": COMPRESS_ZSTD,
    "zstd-dict": COMPRESS_ZSTD_DICT,
}
_COMPRESSION_NAMES = {v: k for k, v in _COMPRESSIONS.items() if k != "none"}
FLAG_LEGACY_LINK = 0x10
FLAG_DATA_KEY = 0x20
FLAG_BLAKE3 = 0x40
_RESERVED = 0x80
#: the record checksum algorithms, by name: the header bit each sets
CHECKSUMS = {"sha256": 0, "blake3": FLAG_BLAKE3}
_CHECKSUM_NAMES = {v: k for k, v in CHECKSUMS.items()}
#: the checksum algorithm of new records when none is chosen ("auto": by size)
DEFAULT_CHECKSUM = "auto"
#: with ``checksum="auto"``, a record whose body has at least this many bytes is BLAKE3,
#: a smaller one SHA-256: below ~4 KiB BLAKE3 hashes one 1 KiB chunk at a time and
#: SHA-256 with the CPU's SHA instructions is as fast or faster; above it BLAKE3's SIMD
#: lanes make it ~3x cheaper (docs/benchmarks.md, "coldread")
BLAKE3_FROM = 4096

_NONCE = 12
_FP = 4
_GCM_TAG = 16
_ident_head = struct.Struct(">I")
_seq_ts = struct.Struct(">qd")
_head_seq = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Header:
    """The clear-text header of a stored record (readable without any key)."""

    version: int
    format: int
    compression: int
    key_id: str | None
    legacy_link: bool = False
    #: encrypted with the agent's data key (crypto-shredding), not the master key
    data_key: bool = False
    #: the record's checksum algorithm: ``"sha256"`` or ``"blake3"``
    algorithm: str = "sha256"

    @property
    def format_name(self) -> str:
        """``"json"`` or ``"msgpack"``."""
        return "msgpack" if self.format else "json"


class Sealed(NamedTuple):
    """A record ready for the backend, and its chain link."""

    payload: bytes
    checksum: bytes
    link: bytes


class Opened(NamedTuple):
    """A verified record: its serialized ``body``, the ``prev`` link it carries (None
    for records that carry none: version 0 and legacy links), its own ``link``, and
    from its header the body's ``format``, the ``key_id`` it was encrypted with (None:
    not encrypted), its layout ``version`` (0: written before the record header) and
    its checksum ``algorithm`` (``"sha256"`` or ``"blake3"``)."""

    body: bytes
    prev: bytes | None
    link: bytes
    format: int
    key_id: str | None
    version: int
    algorithm: str = "sha256"


#: the tag key of a typed value, as msgpack packs it (:attr:`Format.marker`)
#: (a body may hold these only if it holds a ``$``: checked as ``body.find(b"$") >= 0``,
#: not ``b"$" in body``, which first tries ``b"$"`` as an int and formats and clears a
#: TypeError, ~1.8k instructions per check: 4 % of each replayed event, callgrind)
_MSGPACK_TAG = b"\xa2$t"
_JSON_TAG = b'"$t"'
_new_tuple = tuple.__new__
_orjson_loads = orjson.loads
