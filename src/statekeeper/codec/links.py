"""A record's chain link and checksum: its identity's encoding (agent id, record
type, seq, timestamp), the link over its canonical plaintext by its header's
algorithm (SHA-256 or BLAKE3), the checksum of one not stored as that plaintext,
and the version-0 checksum (see :mod:`statekeeper.codec.pipeline`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import blake3

from . import layout
from .formats import JSON, MSGPACK
from .layout import CHECKSUMS, FLAG_BLAKE3, VERSION
from .widehash import wide_blake3 as _wide_blake3

if TYPE_CHECKING:
    pass

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_ident_head = layout._ident_head
_seq_ts = layout._seq_ts


@functools.lru_cache(maxsize=4096)
def _prefixed(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return _ident_head.pack(len(raw)) + raw


@functools.lru_cache(maxsize=4096)
def _names(agent_id: str, record_type: str) -> bytes:
    return _prefixed(agent_id) + _prefixed(record_type)


def identity(agent_id: str, seq: int, record_type: str, timestamp: float) -> bytes:
    """The clear-text identity a record is bound to (an unambiguous encoding of agent
    id, record type, seq and timestamp)."""
    return _names(agent_id, record_type) + _seq_ts.pack(seq, timestamp)


def _link(ident: bytes, flags: int, prev: bytes, body: bytes) -> bytes:
    """A record's chain link: the hash its ``flags`` name (format and algorithm bits)
    over its identity and its canonical plaintext (the unencrypted, uncompressed
    version-1 layout: header, prev, body)."""
    canon = _CANON[flags]
    return _HASHES[flags >> 6](b"".join((b"sk-link/1", ident, canon, prev, body))).digest()


def _plain_link(
    hasher: _Hasher, agent_id: str, record_type: str, seq: int, timestamp: float, payload: bytes
) -> bytes:
    """The link of a record stored as its canonical plaintext (``payload`` is the
    canonical bytes), by ``hasher`` (its header's algorithm). BLAKE3 hashes the link
    input as one buffer: a short prefix then the payload by ``update`` costs more than
    copying the payload once (32 KB: 13.8 against 10.7 us, 4 KB: 4.1 against 2.2 us of
    CPU; docs/benchmarks.md, "cold11b"); SHA-256 is as fast or faster by ``update``,
    without the copy. Where the C hash is built (:mod:`.widehash`) BLAKE3 reads the
    payload in place at full SIMD width instead, the same digest (32.6 KB: 6.3 us;
    docs/benchmarks.md, "cold4")."""
    names, seq_ts = _names(agent_id, record_type), _seq_ts.pack(seq, timestamp)
    if payload[1] & FLAG_BLAKE3:
        if _wide_blake3 is not None:  # (full SIMD width, the payload read in place)
            return _wide_blake3(b"".join((b"sk-link/1", names, seq_ts)), payload)
        # (one join: the payload's one copy, no head made first)
        return hasher(b"".join((b"sk-link/1", names, seq_ts, payload))).digest()
    hashed = hasher(b"".join((b"sk-link/1", names, seq_ts)))
    hashed.update(payload)
    return hashed.digest()


def legacy_checksum(agent_id: str, seq: int, record_type: str, payload: bytes) -> bytes:
    """The checksum of a version-0 record (SHA-256 of identity and payload)."""
    head = b"%s\x00%d\x00%s\x00" % (agent_id.encode(), seq, record_type.encode())
    return hashlib.sha256(head + payload).digest()


def _stored_checksum(link: bytes, payload: bytes, algo: int) -> bytes:
    """The checksum of an unencrypted record that is not stored as its canonical
    plaintext (compressed, or a converted legacy record): its link and its bytes, hashed
    with the record's algorithm (its header bit ``algo``)."""
    return _HASHES[algo >> 6](b"".join((b"sk-stored/1", link, payload))).digest()


class _Hash(Protocol):
    def update(self, data: bytes, /) -> object: ...
    def digest(self) -> bytes: ...


_Hasher = Callable[[bytes], _Hash]
#: the canonical header of a record, by its format and algorithm bits
_CANON = tuple(bytes((VERSION, flags, 0)) for flags in range(0x80))
#: the record hashes, by the header's algorithm bit (``flags >> 6``)
_HASHES: tuple[_Hasher, _Hasher] = (hashlib.sha256, blake3.blake3)
#: the hash of a record stored as its canonical plaintext (no key, not compressed), by
#: its header: JSON only, and JSON or msgpack
_PLAIN_JSON = {bytes((VERSION, JSON | a, 0)): _HASHES[a >> 6] for a in CHECKSUMS.values()}
_SHA_JSON = bytes((VERSION, JSON, 0))
_B3_JSON = bytes((VERSION, JSON | FLAG_BLAKE3, 0))
_PLAIN_ANY = {
    bytes((VERSION, f | a, 0)): _HASHES[a >> 6] for f in (JSON, MSGPACK) for a in CHECKSUMS.values()
}
