"""The codec: how a record becomes stored bytes and comes back verified.

Every byte a backend stores passes through one pipeline::

    value ─serialize─► body ─compress─► ─encrypt─► (payload, checksum)      (write)
    value ◄─deserialize─ body ◄─decompress─ ◄─decrypt+verify─ (payload, checksum)   (read)

**Record layout** (``payload``; all integers big-endian)::

    0      version            0x01
    1      flags              bits 0-1 format (0 JSON, 1 msgpack)
                              bits 2-3 compression (0 none, 1 zstd, 2 zstd with
                                       the built-in dictionary 1: see zstd_dict.py)
                              bit 4    legacy link (a record converted from version 0)
                              bit 5    data key: encrypted with the agent's own data
                                       key (crypto-shredding), not the master key
                              bit 6    BLAKE3: the record's link and checksum are
                                       BLAKE3 (32 bytes), not SHA-256
                              bit 7    reserved, zero
    2      key id length L    0 = not encrypted
    3      key id             L bytes of ASCII
    …      (encrypted only)   4-byte key fingerprint, 12-byte nonce
    …      sealed part        prev link (32 bytes, absent for a legacy link)
                              + body (compressed when the flag says so);
                              AES-256-GCM ciphertext of that when encrypted

``checksum`` is the record's authenticator: the 16-byte GCM tag when encrypted, else
the record's *link* (for a compressed record, the hash of the link and the stored
bytes, so that no stored bit goes unchecked).

**Checksum algorithm.** A record's hash (its link, and the checksum of a compressed
one) is SHA-256, or BLAKE3 when its header's bit 6 says so (``Codec(checksum=
"blake3")``). The bit is part of the hashed header (and of the GCM associated data), so
a record is verified with the algorithm it was written with: records of both kinds mix
in one stream, and every record written before the bit existed is a SHA-256 record. Both
are cryptographic 256-bit hashes; BLAKE3 is ~3x cheaper on snapshot-sized records
(docs/benchmarks.md, "coldread"). A reader older than the bit refuses a BLAKE3 record
as an invalid header, never misreads it.

**Identity.** Agent id, seq, record type and timestamp stay in the clear (the backend
indexes them) and are bound to the record: they are GCM associated data (with the
header), and inputs of the link. A payload copied to another agent, seq, type or time
fails verification.

**Chain.** Each record carries the link of the record before it (``prev``; 32 zero
bytes for seq 1) and has its own link::

    link = H("sk-link/1" ‖ identity ‖ 0x01 ‖ flags ‖ 0x00 ‖ prev ‖ body)

(``H`` the record's algorithm, ``flags`` its format and algorithm bits)
    identity = len(agent) ‖ agent ‖ len(kind) ‖ kind ‖ seq (int64) ‖ timestamp (float64)

(``0x01 ‖ flags ‖ 0x00 ‖ prev ‖ body`` is the canonical plaintext: exactly the payload
of an uncompressed JSON record without a key), so a stream is a hash chain over its
plaintext. Links never depend on a key (key
rotation re-encrypts records without touching the chain) and, when a key is set,
are never stored in the clear (only inside ciphertexts and MACs). A snapshot carries
the link of the event at its seq. The stream **head tag** authenticates the head::

    head_tag = 0x01 ‖ L ‖ key id ‖ HMAC-SHA256(head key, "sk-head/1" ‖ agent ‖ seq ‖ link)

(without a key, the tag is ``0x01 ‖ 0x00 ‖ link``: the link already commits to the agent,
the seq and every record before it). Deleting, reordering, replaying, truncating or
splicing records then shows as a broken chain or a head that does not match.

**Without a key** records are stored in the clear and the SHA-256 chain detects
accidental corruption (bit rot, torn or misdirected writes, a bad copy) — but anyone
who can write the file can recompute every hash. Only a key defends against an
attacker (see ``docs/security.md``).

**Data keys.** With a key vault on the keyring, records are encrypted with the agent's
data key (flag bit 5; the key id is the master key that wraps it, the fingerprint the
data key's): everything else — layout, chain, head tags (master key) — is unchanged, so
records of both kinds mix in one stream and stores written before keep opening. A
record whose data key was destroyed raises :class:`AgentForgotten` (a reader older than
this flag refuses such a record as an invalid header, never misreads it).

**Version 0** records (written before this layout existed: a bare JSON object with a
SHA-256 checksum of identity + payload, no chain) still load in a store without a
key; a store with a key refuses them, and ``statekeeper rekey`` converts them.

(Over 600 lines for a reason: the record layout — header, chain link, compression,
encryption, head tags and the version-0 reader — is one format, written and read by
the same functions; its parts only make sense together and are tested together.)
"""

from __future__ import annotations

import copy
import functools
import hashlib
import hmac
import os
import re
import struct
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from hmac import compare_digest as _compare_digest
from itertools import repeat
from operator import methodcaller
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast, overload

import blake3
import orjson

from ..errors import (
    ConfigurationError,
    DecryptionError,
    IntegrityError,
    KeyNotFound,
    SerializationError,
    StatekeeperError,
)
from .datakeys import uses_data_key
from .formats import FORMATS, JSON, MSGPACK, Format, has_marker
from .types import TypeRegistry, from_plain
from .widehash import wide_blake3 as _wide_blake3

if TYPE_CHECKING:
    from typing_extensions import deprecated

    from ..records import EventRow
    from .keys import DerivedKey, Keyring
else:  # only the overloads of the deprecated keywords use it: nothing to do at run time

    def deprecated(message):
        return lambda fn: fn


__all__ = [
    "CHAIN_BROKEN",
    "CHECKSUMS",
    "VERSION",
    "ZERO_LINK",
    "Codec",
    "Header",
    "Opened",
    "Sealed",
]

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


def _renamed_keywords(
    method: str,
    record_type: str | None,
    timestamp: float | None,
    kind: str | None,
    ts: float | None,
) -> tuple[str, float]:
    """``record_type`` and ``timestamp`` of a call to :meth:`Codec.seal` or
    :meth:`Codec.open` that used their old names ``kind`` and ``ts`` (a warning each;
    ARCHITECTURE.md, "Vocabulary"), or a :class:`TypeError` naming what is missing."""
    for old, new, value, given in (
        ("kind", "record_type", kind, record_type),
        ("ts", "timestamp", ts, timestamp),
    ):
        if value is not None:
            if given is not None:
                raise TypeError(f"Codec.{method}() got {new} and its deprecated name {old}")
            warnings.warn(
                f"Codec.{method}({old}=...) is deprecated: use Codec.{method}({new}=...)",
                DeprecationWarning,
                stacklevel=3,
            )
    record_type = kind if record_type is None else record_type
    timestamp = ts if timestamp is None else timestamp
    if record_type is None or timestamp is None:
        missing = [
            n for n, v in (("record_type", record_type), ("timestamp", timestamp)) if v is None
        ]
        raise TypeError(f"Codec.{method}() missing required arguments: {missing}")
    return record_type, timestamp


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


class _Local(threading.local):
    decompressor: Any = None
    dict_decompressor: Any = None


class Codec:
    """Serialize → compress → encrypt → authenticate on write, and back, verified.

    Args:
        format: ``"json"`` (orjson, default) or ``"msgpack"`` for new records; records
            of either format are read.
        types: a :class:`TypeRegistry` (or classes to register) of the enums,
            dataclasses and models that may be stored and rebuilt.
        compression: ``"zstd"`` to compress bodies of at least ``compress_min_bytes``
            (kept only when smaller), ``"zstd-dict"`` the same with statekeeper's
            built-in dictionary (JSON Patch events of small documents: ~2x smaller than
            plain zstd, see :mod:`.zstd_dict`), or None. Records compressed either way
            are read by every codec of this version.
        compression_level: zstd level (1-22; 3 is zstd's default).
        keyring: a :class:`~statekeeper.security.Keyring`: records are encrypted with
            AES-256-GCM under its active key, and records that are not encrypted are
            refused. None stores records in the clear with hash integrity only.
        checksum: the hash of new records' links and checksums: ``"sha256"``,
            ``"blake3"`` (~3x cheaper on large records, such as snapshots), or
            ``"auto"``: BLAKE3 for bodies of :data:`BLAKE3_FROM` bytes or more,
            SHA-256 below; None: :data:`DEFAULT_CHECKSUM`. Records of either are read by
            every codec of this version (each record's header names its algorithm).
    """

    name = "statekeeper-record/1"

    def __init__(
        self,
        *,
        format: str = "json",
        types: TypeRegistry | Iterable[type] | None = None,
        compression: str | None = None,
        compression_level: int = 3,
        compress_min_bytes: int = 1024,
        keyring: Keyring | None = None,
        checksum: str | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigurationError(f"format must be one of {sorted(FORMATS)}, not {format!r}")
        if compression not in _COMPRESSIONS:
            raise ConfigurationError(
                f"compression must be 'zstd', 'zstd-dict' or None, not {compression!r}"
            )
        if checksum is None:
            checksum = DEFAULT_CHECKSUM
        if checksum not in CHECKSUMS and checksum != "auto":
            raise ConfigurationError(
                f"checksum must be one of {sorted(CHECKSUMS)} or 'auto', not {checksum!r}"
            )
        if not 1 <= compression_level <= 22:
            raise ConfigurationError("compression_level must be 1..22")
        if compress_min_bytes < 0:
            raise ConfigurationError("compress_min_bytes must be >= 0")
        if types is None or isinstance(types, TypeRegistry):
            self.types = types if types is not None else TypeRegistry()
        else:
            self.types = TypeRegistry(types)
        self._formats = {fid: Format(fid, self.types) for fid in ((JSON, FORMATS[format]))}
        self.format = self._formats[FORMATS[format]]
        self._json = self._formats[JSON]
        self.compression = _COMPRESSIONS[compression]
        self.compression_level = compression_level
        self.compress_min_bytes = compress_min_bytes
        self._zstd: Any = None
        if self.compression != COMPRESS_NONE:
            self._zstd = _zstd()
        self._local = _Local()
        #: idle compressors, taken for one ``compress`` and put back (see _compress)
        self._compressors: list[Any] = []
        self.keyring = keyring
        #: the key family of the store this codec seals for (its store id: a data key
        #: per family and agent, see :mod:`.keyscope`); None until the store sets it
        #: (then, and for a codec of no store, an agent's data key is keyed by its id)
        self.key_family: str | None = None
        #: True from the moment a store with a vault that keys by family takes this codec
        #: until it set :attr:`key_family` (:func:`statekeeper.store.keyguard.key_family`):
        #: a data key made in between would be the agent's legacy key (keyed by its id
        #: alone), which a ``forget`` of the same id in any other store of the vault
        #: destroys: refused instead (see :meth:`seal`)
        self.family_pending = False
        # with a key, records (and heads) that are not encrypted are refused
        self._strict = keyring is not None
        self.checksum = checksum
        # the header bit of new records (with "auto": of those below BLAKE3_FROM bytes)
        self._algo = FLAG_BLAKE3 if checksum == "blake3" else 0
        self._auto = checksum == "auto"
        self._hash = _HASHES[self._algo >> 6]
        # the SHA-256 header bytes of an unencrypted record, per body compression (for a
        # caller that seals SHA-256 records itself; seal() stamps the algorithm it chose)
        self._plain_headers = {c: bytes((VERSION, self.format.id | (c << 2), 0)) for c in (0, 1, 2)}

    def __repr__(self) -> str:
        return (
            f"Codec(format={self.format.name!r}, compression="
            f"{_COMPRESSION_NAMES[self.compression]!r}, keyring={self.keyring!r}, "
            f"checksum={self.checksum!r})"
        )

    def migrating(self) -> Codec:
        """A copy of this codec that also *reads* records and heads written without a key
        (it still writes with the active key). For ``rekey`` only, which converts a
        store to encryption; never use it to serve reads."""
        other = copy.copy(self)
        other._local = _Local()
        other._compressors = []
        other._strict = False
        return other

    @property
    def encrypted(self) -> bool:
        """True when records are encrypted (a keyring is set)."""
        return self.keyring is not None

    # -- documents -------------------------------------------------------------------

    def serialize(self, value: Any, root: str = "value") -> bytes:
        """A document as bytes in this codec's format; ``SerializationError`` names the path."""
        return self.format.dumps(value, root)

    def deserialize(
        self, body: bytes, agent_id: str = "*", seq: int | None = None, *, fmt: int | None = None
    ) -> Any:
        """Parse a body made by :meth:`serialize` (in format ``fmt``, default this codec's).

        Bytes that do not parse are an :class:`IntegrityError`; a tag that cannot be
        rebuilt (an unregistered type) a :class:`SerializationError`.
        """
        parser = self.format if fmt is None else self._format(fmt, agent_id, seq)
        try:
            return parser.loads(body)
        except SerializationError:
            raise
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc

    def copy_dumps(self, value: Any) -> bytes:
        """Bytes for an in-memory deep copy of a document (JSON, tagged)."""
        return self._json.dumps(value, "data")

    def copy_loads(self, blob: bytes) -> Any:
        """A fresh document from :meth:`copy_dumps` bytes."""
        return self._json.loads(blob, "data")

    def _format(self, fmt: int, agent_id: str, seq: int | None) -> Format:
        parser = self._formats.get(fmt)
        if parser is None:
            try:
                parser = self._formats[fmt] = Format(fmt, self.types)
            except SerializationError as exc:
                raise IntegrityError(agent_id, seq, str(exc)) from exc
        return parser

    # -- records ---------------------------------------------------------------------

    @overload
    def seal(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        body: bytes,
        prev: bytes = ZERO_LINK,
        *,
        fmt: int | None = None,
        legacy_link: bool = False,
        algorithm: str | None = None,
    ) -> Sealed: ...
    @overload
    @deprecated("Codec.seal(kind=..., ts=...) is deprecated: use record_type=, timestamp=")
    def seal(
        self,
        agent_id: str,
        seq: int,
        record_type: str | None = None,
        timestamp: float | None = None,
        body: bytes | None = None,
        prev: bytes = ZERO_LINK,
        *,
        fmt: int | None = None,
        legacy_link: bool = False,
        algorithm: str | None = None,
        kind: str | None = None,
        ts: float | None = None,
    ) -> Sealed: ...
    def seal(
        self,
        agent_id: str,
        seq: int,
        record_type: str | None = None,
        timestamp: float | None = None,
        body: bytes | None = None,
        prev: bytes = ZERO_LINK,
        *,
        fmt: int | None = None,
        legacy_link: bool = False,
        algorithm: str | None = None,
        kind: str | None = None,
        ts: float | None = None,
    ) -> Sealed:
        """Compress, encrypt and authenticate a serialized ``body``.

        ``prev`` is the link of the record before it in the chain (for a snapshot: the
        link of the event at its seq). ``fmt`` names the body's format when it is not
        this codec's (re-encrypting an older record); ``legacy_link`` keeps the link of
        a version-0 record (``body`` must then be its original bytes; always SHA-256);
        ``algorithm`` names the checksum algorithm when it is not this codec's (an
        older record re-encrypted keeps its link: :attr:`Opened.algorithm`). ``kind``
        and ``ts`` are the deprecated names of ``record_type`` and ``timestamp``.
        """
        if (
            record_type is None
            or timestamp is None
            or body is None
            or kind is not None
            or ts is not None
        ):  # the deprecated keywords, or an argument missing
            record_type, timestamp = _renamed_keywords("seal", record_type, timestamp, kind, ts)
            if body is None:
                raise TypeError("Codec.seal() missing required argument: 'body'")
        if algorithm is None:
            if self._auto and len(body) >= BLAKE3_FROM:
                algo = FLAG_BLAKE3
                hasher = _HASHES[1]
            else:
                algo = self._algo
                hasher = self._hash
        else:
            if algorithm not in CHECKSUMS:
                raise ConfigurationError(
                    f"algorithm must be one of {sorted(CHECKSUMS)}, not {algorithm!r}"
                )
            algo = CHECKSUMS[algorithm]
            hasher = _HASHES[algo >> 6]
        if (
            (fmt is None or fmt in (MSGPACK, JSON))
            and self.keyring is None
            and not legacy_link
            and (self.compression == COMPRESS_NONE or len(body) < self.compress_min_bytes)
        ):  # the common case, kept short: the payload is the canonical plaintext (a
            # snapshot made of a save's packed bytes names its format, msgpack)
            header = _CANON[(self.format.id if fmt is None else fmt) | algo]
            payload = b"".join((header, prev, body))
            names, seq_ts = _names(agent_id, record_type), _seq_ts.pack(seq, timestamp)
            if algo and _wide_blake3 is not None:  # (BLAKE3 at full SIMD width, no join)
                link = _wide_blake3(b"".join((b"sk-link/1", names, seq_ts)), payload)
            else:
                link = hasher(b"".join((b"sk-link/1", names, seq_ts, payload))).digest()
            return _new_tuple(Sealed, (payload, link, link))
        fmt_id = self.format.id if fmt is None else fmt
        ident = _names(agent_id, record_type) + _seq_ts.pack(seq, timestamp)
        if legacy_link:
            algo = 0  # a version-0 record's link is SHA-256: kept as it is
            link = legacy_checksum(agent_id, seq, record_type, body)
            chained = b""
        else:
            link = _link(ident, fmt_id | algo, prev, body)
            chained = prev
        stored, comp = self._compress(body)
        flags = fmt_id | (comp << 2) | (FLAG_LEGACY_LINK if legacy_link else 0) | algo
        if self.keyring is None:
            header = _CANON[flags]
            payload = header + chained + stored
            if comp or legacy_link:  # not the canonical plaintext: cover the stored bytes too
                return Sealed(payload, _stored_checksum(link, payload, algo), link)
            return Sealed(payload, link, link)
        if self.keyring.data_keys is not None and uses_data_key(agent_id):
            if self.family_pending and self.key_family is None:
                raise ConfigurationError(
                    f"sealing a record of {agent_id!r} before its store's key family was"
                    " read (statekeeper.store.keyguard.key_family): its data key would be"
                    " one every store of the key vault shares"
                )
            # the key of the store's family (AgentForgotten if shredded)
            key = self.keyring.data_key(agent_id, create=True, family=self.key_family)
            flags |= FLAG_DATA_KEY
        else:
            key = self.keyring.active
        kid = key.id.encode("ascii")
        nonce = os.urandom(_NONCE)
        header = bytes((VERSION, flags, len(kid))) + kid + key.fingerprint + nonce
        sealed = key.aead.encrypt(nonce, chained + stored, b"sk-aead/1" + header + ident)
        return Sealed(header + sealed[:-_GCM_TAG], sealed[-_GCM_TAG:], link)

    @overload
    def open(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> Opened: ...
    @overload
    @deprecated("Codec.open(kind=..., ts=...) is deprecated: use record_type=, timestamp=")
    def open(
        self,
        agent_id: str,
        seq: int,
        record_type: str | None = None,
        timestamp: float | None = None,
        payload: bytes | None = None,
        checksum: bytes | None = None,
        *,
        kind: str | None = None,
        ts: float | None = None,
    ) -> Opened: ...
    def open(
        self,
        agent_id: str,
        seq: int,
        record_type: str | None = None,
        timestamp: float | None = None,
        payload: bytes | None = None,
        checksum: bytes | None = None,
        *,
        kind: str | None = None,
        ts: float | None = None,
    ) -> Opened:
        """Verify a stored record and return its body and links.

        Raises :class:`IntegrityError` (altered, moved, truncated, or a plaintext record
        in an encrypted store), :class:`KeyNotFound` / :class:`DecryptionError` (the
        record's key is missing or different). ``kind`` and ``ts`` are the deprecated
        names of ``record_type`` and ``timestamp``.
        """
        if (
            record_type is None
            or timestamp is None
            or payload is None
            or checksum is None
            or kind is not None
            or ts is not None
        ):  # the deprecated keywords, or an argument missing
            record_type, timestamp = _renamed_keywords("open", record_type, timestamp, kind, ts)
            if payload is None or checksum is None:
                raise TypeError("Codec.open() missing required arguments: 'payload', 'checksum'")
        if (
            self.keyring is None
            and type(payload) is bytes
            and type(checksum) is bytes
            and len(payload) >= 35
            and (hasher := _PLAIN_JSON.get(payload[:3])) is not None
        ):  # the common case, kept short: version 1, JSON, not compressed, no key
            # the payload *is* the canonical plaintext here: hash it as it is
            link = hasher(
                b"".join(
                    (
                        b"sk-link/1",
                        _names(agent_id, record_type),
                        _seq_ts.pack(seq, timestamp),
                        payload,
                    )
                )
            ).digest()
            head_prev = payload[3:35]
            body = payload[35:]
            if link != checksum:  # no key, no secret: a plain comparison is fine
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            return _new_tuple(
                Opened,
                (body, head_prev, link, JSON, None, VERSION, _CHECKSUM_NAMES[payload[1]]),
            )
        if type(payload) is not bytes or type(checksum) is not bytes:
            if not isinstance(payload, bytes | bytearray | memoryview) or not isinstance(
                checksum, bytes | bytearray | memoryview
            ):
                # e.g. a row rewritten as TEXT by hand: never ours, never trusted
                raise IntegrityError(agent_id, seq, f"{record_type} record is not stored as bytes")
            payload, checksum = bytes(payload), bytes(checksum)
        if len(payload) < 3 or payload[0] != VERSION:
            if payload[:1] == b"{":
                return self._open_v0(agent_id, seq, record_type, payload, checksum)
            version = payload[0] if payload else None
            raise IntegrityError(
                agent_id, seq, f"{record_type} record has unknown version {version}"
            )
        flags = payload[1]
        if (
            flags & (_RESERVED | 0x02)
            or flags & 0x0C == 0x0C
            or flags & (FLAG_LEGACY_LINK | FLAG_BLAKE3) == FLAG_LEGACY_LINK | FLAG_BLAKE3
        ):  # reserved bits; format 0-1, compression 0-2; a legacy link is SHA-256
            raise IntegrityError(agent_id, seq, f"{record_type} record has an invalid header")
        fmt = flags & 0x03
        comp = (flags >> 2) & 0x03
        legacy = flags & FLAG_LEGACY_LINK
        algo = flags & FLAG_BLAKE3
        algorithm = _CHECKSUM_NAMES[algo]
        ident = _names(agent_id, record_type) + _seq_ts.pack(seq, timestamp)
        kid_len = payload[2]
        if kid_len == 0 and flags & FLAG_DATA_KEY:  # a data key means encrypted
            raise IntegrityError(agent_id, seq, f"{record_type} record has an invalid header")
        if kid_len == 0:
            if self._strict:
                raise IntegrityError(
                    agent_id,
                    seq,
                    f"{record_type} record is not encrypted: "
                    "an encrypted store accepts no plaintext",
                )
            if legacy:
                body = (
                    self._decompress(payload[3:], comp, agent_id, seq, record_type)
                    if comp
                    else payload[3:]
                )
                link = legacy_checksum(agent_id, seq, record_type, body)
                prev: bytes | None = None
            else:
                if len(payload) < 35:
                    raise IntegrityError(agent_id, seq, f"{record_type} record is truncated")
                prev = payload[3:35]
                body = (
                    self._decompress(payload[35:], comp, agent_id, seq, record_type)
                    if comp
                    else payload[35:]
                )
                link = _link(ident, fmt | algo, prev, body)
            # a compressed record's link covers what it decompresses to; its checksum also
            # covers the stored bytes (a flip in an ignored bit of the frame still shows)
            expected = _stored_checksum(link, payload, algo) if comp or legacy else link
            if not hmac.compare_digest(expected, checksum):
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            return Opened(body, prev, link, fmt, None, VERSION, algorithm)
        end = 3 + kid_len
        start = end + _FP + _NONCE
        if len(payload) < start:
            raise IntegrityError(agent_id, seq, f"{record_type} record is truncated")
        try:
            key_id = payload[3:end].decode("ascii")
        except UnicodeDecodeError:
            raise IntegrityError(
                agent_id, seq, f"{record_type} record has an invalid key id"
            ) from None
        key: DerivedKey | None
        if flags & FLAG_DATA_KEY:
            key = self._data_key(agent_id, seq, key_id, payload[end : end + _FP])
        else:
            key = self.keyring.get(key_id) if self.keyring is not None else None
        if key is None:
            raise KeyNotFound(agent_id, seq, key_id, no_keyring=self.keyring is None)
        if not hmac.compare_digest(key.fingerprint, payload[end : end + _FP]):
            raise DecryptionError(
                agent_id,
                seq,
                key_id,
                f"{record_type} record was encrypted with a different key named {key_id!r} "
                "(key fingerprint mismatch): wrong key material in the keyring",
            )
        nonce = payload[end + _FP : start]
        try:
            plain = key.aead.decrypt(
                nonce, payload[start:] + checksum, b"sk-aead/1" + payload[:start] + ident
            )
        except _invalid_tag():
            raise IntegrityError(
                agent_id,
                seq,
                f"{record_type} record failed authentication (altered, or moved from another "
                "agent, seq, type or time)",
            ) from None
        if legacy:
            body = self._decompress(plain, comp, agent_id, seq, record_type)
            link = legacy_checksum(agent_id, seq, record_type, body)
            return Opened(body, None, link, fmt, key_id, VERSION)
        if len(plain) < 32:
            raise IntegrityError(agent_id, seq, f"{record_type} record is truncated")
        prev = plain[:32]
        body = self._decompress(plain[32:], comp, agent_id, seq, record_type)
        link = _link(ident, fmt | algo, prev, body)
        return Opened(body, prev, link, fmt, key_id, VERSION, algorithm)

    def _data_key(
        self, agent_id: str, seq: int, key_id: str, fingerprint: bytes | None = None
    ) -> DerivedKey:
        """The agent's data key for opening a record whose key has ``fingerprint``
        (AgentForgotten when destroyed)."""
        if self.keyring is None:
            raise KeyNotFound(agent_id, seq, key_id, no_keyring=True)
        if self.keyring.data_keys is None:
            raise DecryptionError(
                agent_id,
                seq,
                key_id,
                "the record is encrypted with the agent's data key and the keyring has no"
                ' key vault (set "data_keys" in the key file)',
            )
        try:
            return self.keyring.data_key(agent_id, fingerprint=fingerprint)
        except DecryptionError as exc:
            if exc.seq is not None:
                raise
            raise DecryptionError(agent_id, seq, exc.key_id, exc.reason) from None

    def _open_v0(
        self, agent_id: str, seq: int, record_type: str, payload: bytes, checksum: bytes
    ) -> Opened:
        if self._strict:
            raise IntegrityError(
                agent_id,
                seq,
                f"{record_type} record is not encrypted (written before encryption was enabled):"
                " an encrypted store accepts no plaintext; run 'statekeeper rekey'",
            )
        link = legacy_checksum(agent_id, seq, record_type, payload)
        if not hmac.compare_digest(link, checksum):
            raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
        return Opened(payload, None, link, JSON, None, 0)

    @staticmethod
    def header(payload: bytes) -> Header | None:
        """The header of a stored payload without verifying it (None if unreadable)."""
        if payload[:1] == b"{":
            return Header(0, JSON, COMPRESS_NONE, None, True)
        if len(payload) < 3 or payload[0] != VERSION:
            return None
        flags, kid_len = payload[1], payload[2]
        try:
            key_id = payload[3 : 3 + kid_len].decode("ascii") if kid_len else None
        except UnicodeDecodeError:
            return None
        return Header(
            VERSION,
            flags & 0x03,
            (flags >> 2) & 0x03,
            key_id,
            bool(flags & FLAG_LEGACY_LINK),
            bool(flags & FLAG_DATA_KEY),
            _CHECKSUM_NAMES[flags & FLAG_BLAKE3],
        )

    def encode(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        value: Any,
        prev: bytes = ZERO_LINK,
        root: str = "value",
    ) -> Sealed:
        """Serialize and seal in one step."""
        return self.seal(agent_id, seq, record_type, timestamp, self.serialize(value, root), prev)

    def decode(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, Opened]:
        """Open and deserialize in one step: ``(document, opened record)``."""
        doc, opened, _ = self.decode_typed(agent_id, seq, record_type, timestamp, payload, checksum)
        return doc, opened

    def decode_typed(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, Opened, bool]:
        """Like :meth:`decode`, plus whether the document may hold typed values (False:
        it is plain JSON, and copies of it need no type handling)."""
        if (
            self.keyring is None
            and type(payload) is bytes
            and type(checksum) is bytes
            and len(payload) >= 35
            and (hasher := _PLAIN_ANY.get(payload[:3])) is not None
        ):  # every load's inner loop: the fast path of open(), inlined
            link = _plain_link(hasher, agent_id, record_type, seq, timestamp, payload)
            if link != checksum:
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            body = payload[35:]
            flags = payload[1]
            opened = _new_tuple(
                Opened,
                (
                    body,
                    payload[3:35],
                    link,
                    flags & 0x03,
                    None,
                    VERSION,
                    _CHECKSUM_NAMES[flags & FLAG_BLAKE3],
                ),
            )
        else:
            opened = self.open(agent_id, seq, record_type, timestamp, payload, checksum)
            body = opened[0]
        fmt = opened[3]
        if fmt == JSON:  # inlined: this is every load's inner loop
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                return from_plain(doc, self.types), opened, True
            return doc, opened, False
        # msgpack (a snapshot made of a save's packed bytes, or a msgpack store): typed
        # values are tagged as in JSON, with the tag key packed as a string
        if fmt != MSGPACK or (body.find(b"$") >= 0 and has_marker(body, _MSGPACK_TAG)):
            return self.deserialize(body, agent_id, seq, fmt=fmt), opened, True
        try:  # (no tag in it: parsed as it is, the marker not looked for again)
            return self._format(fmt, agent_id, seq).loads_plain(body), opened, False
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc

    def decode_view(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, bytes, bytes, int, bool] | None:
        """:meth:`decode_typed` of a record stored as its canonical plaintext (no key,
        version 1, not compressed: every record of a store without a key) without
        copying its body out of ``payload``: ``(document, prev link, link, format,
        typed)``, the body parsed from a view of ``payload``. None when the record is
        not of that kind (:meth:`decode_typed` then opens it, or says why it cannot).

        What a load at a snapshot uses: the copy of a 33 KB snapshot's body and the
        :class:`Opened` built around it are not needed to parse it (docs/benchmarks.md,
        "cold11b"). Raises as :meth:`decode_typed` does for a record of that kind.
        """
        if (
            self.keyring is not None
            or type(payload) is not bytes
            or type(checksum) is not bytes
            or len(payload) < 35
            or (hasher := _PLAIN_ANY.get(payload[:3])) is None
        ):
            return None
        link = _plain_link(hasher, agent_id, record_type, seq, timestamp, payload)
        if link != checksum:
            raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
        fmt = payload[1] & 0x03
        if payload.find(b"$", 35) >= 0 and has_marker(
            payload, _JSON_TAG if fmt == JSON else _MSGPACK_TAG, 35
        ):  # holds a typed value: the general way (looked for in place: no copy of the
            # body for a "$" that is not a tag, e.g. a float's byte, ~1 load in 10)
            body = payload[35:]
            if fmt != JSON:
                doc = self.deserialize(body, agent_id, seq, fmt=fmt)
                return doc, payload[3:35], link, fmt, True
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            return from_plain(doc, self.types), payload[3:35], link, fmt, True
        view = memoryview(payload)[35:]
        try:
            if fmt == JSON:
                doc = _orjson_loads(view)
            else:
                parser = self._formats.get(fmt) or self._format(fmt, agent_id, seq)
                fast = parser._fast  # (what loads_plain tries first, without its two calls)
                try:
                    doc = fast(view) if fast is not None else parser.loads_plain(view)
                except Exception:  # (refused: msgpack's parser answers, or says why)
                    doc = parser.loads_plain(view)
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
        return doc, payload[3:35], link, fmt, False

    def decode_next(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        prev: bytes | None,
    ) -> tuple[Any, bytes, bool]:
        """Decode the record that follows one whose link is ``prev`` in a stream (None:
        not known): ``(document, its link, may hold typed values)``.

        Raises :class:`IntegrityError` when the record does not verify, and when it
        verifies but does not follow ``prev`` (the chain is broken).
        """
        if (
            self.keyring is None
            and type(payload) is bytes
            and type(checksum) is bytes
            and len(payload) >= 35
            and (hasher := _PLAIN_JSON.get(payload[:3])) is not None
        ):  # every fold's inner loop: the common case, kept short
            link = hasher(
                b"".join(
                    (
                        b"sk-link/1",
                        _names(agent_id, record_type),
                        _seq_ts.pack(seq, timestamp),
                        payload,
                    )
                )
            ).digest()
            if link != checksum:
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            if prev is not None and not payload.startswith(prev, 3):
                raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
            body = payload[35:]
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                return from_plain(doc, self.types), link, True
            return doc, link, False
        doc, opened, rich = self.decode_typed(
            agent_id, seq, record_type, timestamp, payload, checksum
        )
        if opened.prev is not None and prev is not None and opened.prev != prev:
            raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
        return doc, opened.link, rich

    def decode_chain(
        self,
        agent_id: str,
        events: Sequence[EventRow],
        prev: bytes | None,
        appends: bool = False,
    ) -> tuple[list[Any], bytes | None, bool, StatekeeperError | None]:
        """:meth:`decode_next` of consecutive stored events (``(seq, type, timestamp,
        payload, checksum)`` rows, :data:`~statekeeper.records.EventRow`), the first
        following a record whose link is ``prev``: ``(documents, the last one's link,
        whether any may hold typed values, the error that stopped it)``. Decoding stops
        at the first record that does not verify or does not follow the one before; the
        documents before it are returned with that error, so that a fold applies them
        (and raises their own errors first) before raising it.

        One call per replay instead of one per event: a load replays up to
        ``snapshot_every`` events, and the call and its seven arguments were ~1/5 of
        each event's cost (cProfile of 99-event replays, docs/benchmarks.md, load11).
        A plain record whose chain link is the expected one (a ``startswith``: link and
        length at once) and whose header is a plain JSON one (either algorithm) is
        checked here; any other goes through :meth:`decode_next`, which names what is
        wrong.

        With ``appends``, the document of an event that is one plain append to a list
        (``{"ops":[{"op":"add","path":"<pointer>/-","value":V}]}`` exactly, as a save
        of a chat writes it) is the tuple ``(pointer, V)``, only ``V`` parsed: the
        operation's dict, its list and its three strings were ~1/3 of the objects a
        replayed message made, built to be taken apart by the fold
        (docs/benchmarks.md, "coldload2"). Such a body is checked byte by byte: it is
        the prefix, a pointer without ``\\`` or ``"``, ``","value":``, one JSON
        value and ``}]}``; a value that may hold a typed value, or anything else, is
        parsed whole as before. (The value's bytes parse as one JSON document only if
        they end where the value does, so a body with more operations, or keys after
        them, never matches.) The record's checksum is verified first either way.
        """
        plain = self.keyring is None
        if appends and plain and prev is not None and len(events) > 1:
            run = _append_run(agent_id, events, prev)
            if run is not None:
                pointer, values, last = run
                if type(pointer) is str:
                    return [(pointer, v) for v in values], last, False, None
                return list(zip(pointer, values, strict=True)), last, False, None
        docs: list[Any] = []
        append = docs.append
        typed = False
        link = prev
        run_type: str | None = None  # the event type of the run the prefix is for
        prefix = b""
        pack = _seq_ts.pack
        join = b"".join
        loads = _orjson_loads
        last_path = b""
        pointer = ""
        sha256, sha_head, b3, b3_head = _HASHES[0], _SHA_JSON, _HASHES[1], _B3_JSON
        try:
            for seq, record_type, timestamp, payload, checksum in events:
                # a SHA-256 record (most events) in one startswith, as before BLAKE3
                if plain and link is not None and type(payload) is bytes:
                    if payload.startswith(sha_head + link):
                        hasher = sha256
                    elif payload.startswith(b3_head + link):
                        hasher = b3
                    else:
                        hasher = None
                else:
                    hasher = None
                if hasher is None:
                    doc, link, rich = self.decode_next(
                        agent_id, seq, record_type, timestamp, payload, checksum, link
                    )
                    typed = typed or rich
                    append(doc)
                    continue
                if record_type != run_type:
                    run_type = record_type
                    prefix = b"sk-link/1" + _names(agent_id, record_type)
                digest = hasher(join((prefix, pack(seq, timestamp), payload))).digest()
                if digest != checksum:  # (decode_next raises what is wrong with it)
                    self.decode_next(agent_id, seq, record_type, timestamp, payload, checksum, link)
                if (
                    appends
                    and payload.startswith(_APPEND_HEAD, 35)
                    and payload.endswith(b"}]}")
                    and payload.find(b"$", 63) < 0
                ):
                    end = payload.find(b'","value":', 63)
                    if end > 0 and payload.find(b"\\", 63, end) < 0:
                        if payload[63:end] != last_path:
                            last_path = payload[63:end]
                            pointer = last_path.decode()
                        try:
                            append((pointer, loads(payload[end + 10 : -3])))
                        except ValueError:  # (the whole body is parsed below: its error)
                            pass
                        else:
                            link = digest
                            continue
                body = payload[35:]
                try:
                    doc = loads(body)
                except ValueError as exc:
                    raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
                if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                    doc = from_plain(doc, self.types)
                    typed = True
                link = digest
                append(doc)
        except StatekeeperError as exc:
            return docs, link, typed, exc
        return docs, link, typed, None

    def decode_appends(
        self, agent_id: str, events: Sequence[EventRow], prev: bytes | None
    ) -> tuple[str, list[Any], bytes] | None:
        """A run of stored events that each append one value to the same list (a chat's
        saves), the first following a record whose link is ``prev``, verified as
        :meth:`decode_chain` verifies it: ``(the list's pointer, the values in order, the
        last link)``, for the fold to extend the list once (:func:`_append_run`). None
        for anything else — a key, no event, another kind of event, more
        than one list, a record that does not verify —: :meth:`decode_chain` then
        decodes it (and names what is wrong). A run of one (a load one event past its
        snapshot) is checked by :func:`_append_one`, a short run (a load past a tail
        snapshot: at most 7) by :func:`_append_few`: the same checks, record by record,
        without the passes over a run (docs/benchmarks.md, "cold11", 2026-12-05
        afternoon; "cold3")."""
        if self.keyring is not None or prev is None or not events:
            return None
        n = len(events)
        run = (
            _append_one(agent_id, events[0], prev)
            if n == 1
            else _append_few(agent_id, events, prev)
            if n <= FEW_APPENDS
            else _append_run(agent_id, events, prev)
        )
        if run is None or type(run[0]) is not str:
            return None
        return run[0], run[1], run[2]

    def tag(self, agent_id: str, seq: int, record_type: str, payload: bytes) -> bytes:
        """The version-0 checksum of ``payload`` (kept for tools that write v0 records)."""
        return legacy_checksum(agent_id, seq, record_type, payload)

    # -- compression -----------------------------------------------------------------

    def _compress(self, body: bytes) -> tuple[bytes, int]:
        if self.compression == COMPRESS_NONE or len(body) < self.compress_min_bytes:
            return body, COMPRESS_NONE
        pool = self._compressors
        try:
            comp = pool.pop()
        except IndexError:  # (none idle: another thread may have taken the last)
            comp = self._compressor()
        out: bytes = comp.compress(body)
        pool.append(comp)
        if len(out) >= len(body):
            return body, COMPRESS_NONE
        return out, self.compression

    def _compressor(self) -> Any:
        """A new compressor for this codec, when none is idle in ``_compressors``.

        A zstandard compressor is not thread-safe: it serves one ``compress`` at a time,
        so a caller takes one from the list (``pop``, atomic under the GIL) and puts it
        back after its ``compress`` — never two threads at once on one. It was one per
        thread (a ``threading.local``): LangGraph runs each ``invoke``'s saver calls on
        threads of its own, so each new thread paid a compressor's set-up (~25 us, its
        context built on the shared digested dictionary) for the one or two records it
        sealed; the list keeps as many as were ever used at once (docs/benchmarks.md,
        "lgturn")."""
        if self.compression == COMPRESS_ZSTD_DICT:
            from .zstd_dict import compressor

            return compressor(self.compression_level)
        return self._zstd.ZstdCompressor(level=self.compression_level, write_content_size=True)

    def _decompress(
        self, data: bytes, comp: int, agent_id: str, seq: int, record_type: str
    ) -> bytes:
        if comp == COMPRESS_NONE:
            return data
        local = self._local
        if comp == COMPRESS_ZSTD_DICT:
            dec = local.dict_decompressor
            if dec is None:
                from .zstd_dict import decompressor

                dec = local.dict_decompressor = decompressor()
        elif comp == COMPRESS_ZSTD:
            dec = local.decompressor
            if dec is None:
                zstd = self._zstd or _zstd()
                dec = local.decompressor = zstd.ZstdDecompressor()
        else:
            raise IntegrityError(agent_id, seq, f"{record_type} record has an invalid header")
        try:
            out: bytes = dec.decompress(data, max_output_size=_MAX_BODY)
        except Exception as exc:
            raise IntegrityError(
                agent_id, seq, f"{record_type} record does not decompress: {exc}"
            ) from exc
        return out

    # -- stream heads and witnesses ----------------------------------------------------

    def plain_sealing(self) -> tuple[bytes, Callable[[str, str], bytes], Any] | None:
        """What :meth:`seal` does for a record of this codec's format when there is no
        key and no compression, bound once for a caller that writes it out (the store's
        flat save, ``store/flat.py``): ``(header, names, seq_ts)`` — the payload is
        ``header + prev + body``, the link ``sha256(b"sk-link/1" + names(agent_id,
        record_type) + seq_ts(seq, timestamp) + payload)``, stored as the checksum too,
        and the head tag ``b"\\x01\\x00" + link`` (:meth:`head_tag`). None when this
        codec encrypts, compresses or hashes with BLAKE3 (``checksum="blake3"``; then
        call :meth:`seal`). Under ``checksum="auto"`` the records it makes are SHA-256
        ones, valid at every size."""
        if self.keyring is not None or self.compression != COMPRESS_NONE or self._algo:
            return None
        return self._plain_headers[0], _names, _seq_ts.pack

    def plain_sealer(
        self,
    ) -> Callable[[str, int, str, float, bytes, bytes], tuple[bytes, bytes]] | None:
        """:meth:`seal` of a record of this codec's format whose body is shorter than
        :data:`BLAKE3_FROM`, bound once for a codec :meth:`plain_sealing` answers for
        (else None): ``sealer(agent_id, seq, record_type, timestamp, body, prev)`` is
        ``(payload, link)``, the link being the checksum too. The same bytes as
        :meth:`seal` (a body that short is SHA-256'd under ``checksum="auto"`` too), in
        one small call instead of :meth:`seal`'s checks of its arguments (96 bytecodes
        a save on the group commit's save, ``WritePipeline.save_fast``)."""
        sealing = self.plain_sealing()
        if sealing is None:
            return None
        header, names, seq_ts = sealing
        join = b"".join
        sha256 = hashlib.sha256

        def sealer(
            agent_id: str, seq: int, record_type: str, timestamp: float, body: bytes, prev: bytes
        ) -> tuple[bytes, bytes]:
            payload = join((header, prev, body))
            return payload, sha256(
                join((b"sk-link/1", names(agent_id, record_type), seq_ts(seq, timestamp), payload))
            ).digest()

        return sealer

    def compressed_sealer(
        self,
    ) -> Callable[[str, int, str, float, bytes, bytes], tuple[bytes, bytes, bytes]] | None:
        """:meth:`seal` of a record of this codec's format whose body is shorter than
        :data:`BLAKE3_FROM`, for a codec that compresses but has no key and SHA-256
        links (``checksum`` ``"sha256"`` or ``"auto"``), bound once (else None):
        ``sealer(agent_id, seq, record_type, timestamp, body, prev)`` is ``(payload,
        checksum, link)``, the same bytes as :meth:`seal` — compressed when the body is
        at least ``compress_min_bytes`` and comes out smaller, the checksum then
        covering the stored bytes — in one small call without :meth:`seal`'s checks of
        its arguments and its helper calls (the LangGraph saver's keyed appends on its
        ``"zstd-dict"`` codec: docs/benchmarks.md, "lgwrite2")."""
        if self.keyring is not None or self.compression == COMPRESS_NONE or self._algo:
            return None
        fmt_id = self.format.id
        plain_header = _CANON[fmt_id]
        packed_header = _CANON[fmt_id | (self.compression << 2)]
        smallest = self.compress_min_bytes
        pool = self._compressors
        compressor = self._compressor
        join = b"".join
        sha256 = hashlib.sha256
        names, seq_ts = _names, _seq_ts.pack

        def sealer(
            agent_id: str, seq: int, record_type: str, timestamp: float, body: bytes, prev: bytes
        ) -> tuple[bytes, bytes, bytes]:
            head = join((b"sk-link/1", names(agent_id, record_type), seq_ts(seq, timestamp)))
            link = sha256(join((head, plain_header, prev, body))).digest()
            if len(body) >= smallest:
                try:
                    comp = pool.pop()
                except IndexError:  # none idle
                    comp = compressor()
                out = comp.compress(body)
                pool.append(comp)
                if len(out) < len(body):
                    payload = join((packed_header, prev, out))
                    return payload, sha256(join((b"sk-stored/1", link, payload))).digest(), link
            return join((plain_header, prev, body)), link, link

        return sealer

    def head_tag(self, agent_id: str, seq: int, link: bytes) -> bytes:
        """The authenticated head of a stream whose last record (``seq``) has ``link``."""
        return self.head_tagger()(agent_id, seq, link)

    def head_tagger(self) -> Callable[[str, int, bytes], bytes]:
        """:meth:`head_tag` with the active key bound now (its id and HMAC looked up
        once): for a caller that tags many streams, a restore's check."""
        if self.keyring is None:
            # the link already commits to agent, seq and every record before it
            return _unkeyed_tag
        key = self.keyring.active
        kid = key.id.encode("ascii")
        prefix = b"\x01" + bytes((len(kid),)) + kid
        mac = key.head_mac

        def tag(agent_id: str, seq: int, link: bytes) -> bytes:
            return prefix + mac(_head_message(b"sk-head/1", agent_id, seq, link))

        return tag

    def check_head(self, agent_id: str, seq: int, link: bytes | None, tag: bytes | None) -> None:
        """Verify a stored head tag against the stream read; raises ``IntegrityError``.

        A stream with no head tag (written by an older version, or by a backend that
        does not store tags) passes only in a store without a key.
        """
        if (
            type(tag) is bytes
            and len(tag) == 34
            and tag[1] == 0
            and tag[0] == 1
            and link is not None
            and not self._strict
            and _compare_digest(link, tag[2:])
        ):  # an unkeyed tag that matches (every load of a store without a key)
            return
        if tag is None:
            if self._strict:
                raise IntegrityError(
                    agent_id, None, "the stream head is not authenticated (no head tag)"
                )
            return
        if link is None:  # a stream of version-0 records: nothing to check against
            return
        tag = bytes(tag)
        if len(tag) < 2 or tag[0] != 1 or len(tag) != 2 + tag[1] + 32:
            raise IntegrityError(agent_id, None, "the stream head tag is malformed")
        if tag[1] == 0:
            if self._strict:
                raise IntegrityError(
                    agent_id, None, "the stream head is not authenticated with a key"
                )
            expected = link
        else:
            key_id = tag[2 : 2 + tag[1]].decode("ascii", "replace")
            key = self.keyring.get(key_id) if self.keyring is not None else None
            if key is None:
                raise KeyNotFound(agent_id, None, key_id, no_keyring=self.keyring is None)
            expected = key.head_mac(_head_message(b"sk-head/1", agent_id, seq, link))
        if not hmac.compare_digest(expected, tag[-32:]):
            raise IntegrityError(
                agent_id,
                None,
                f"the stream head does not match its records (head seq {seq}): records were"
                " removed, replaced or added, or the head was altered",
            )

    @staticmethod
    def head_key_id(tag: bytes | None) -> str | None:
        """The key id a head tag was made with (None: unkeyed or no tag)."""
        if tag is None or len(tag) < 2 or tag[1] == 0:
            return None
        return bytes(tag[2 : 2 + tag[1]]).decode("ascii", "replace")

    def witness_digest(self, agent_id: str, seq: int, link: bytes) -> tuple[str | None, str]:
        """``(key id, hex digest)`` committing to a stream's content up to ``seq``."""
        message = _head_message(b"sk-witness/1", agent_id, seq, link)
        if self.keyring is None:
            return None, hashlib.sha256(message).hexdigest()
        key = self.keyring.active
        return key.id, key.witness_mac(message).hex()

    def witness_seal(self, data: bytes) -> tuple[str | None, str]:
        """``(key id, hex MAC)`` over a whole witness file's content (SHA-256 without a key)."""
        if self.keyring is None:
            return None, hashlib.sha256(b"sk-witness-file/1" + data).hexdigest()
        key = self.keyring.active
        return key.id, key.witness_mac(b"sk-witness-file/1" + data).hex()

    def check_witness_seal(self, data: bytes, key_id: str | None, mac: str) -> bool:
        """True when ``mac`` (from :meth:`witness_seal`) matches ``data``."""
        if key_id is None:
            expected = hashlib.sha256(b"sk-witness-file/1" + data).hexdigest()
        else:
            key = self.keyring.get(key_id) if self.keyring is not None else None
            if key is None:
                raise KeyNotFound("*", None, key_id, no_keyring=self.keyring is None)
            expected = key.witness_mac(b"sk-witness-file/1" + data).hex()
        return hmac.compare_digest(expected, str(mac))

    def check_witness_digest(
        self, agent_id: str, seq: int, link: bytes, key_id: str | None, digest: str
    ) -> bool:
        """True when ``digest`` (made by :meth:`witness_digest`) matches ``link`` at ``seq``.

        Raises :class:`KeyNotFound` when the digest was made with a key not in the keyring.
        """
        message = _head_message(b"sk-witness/1", agent_id, seq, link)
        if key_id is None:
            expected = hashlib.sha256(message).hexdigest()
        else:
            key = self.keyring.get(key_id) if self.keyring is not None else None
            if key is None:
                raise KeyNotFound(agent_id, seq, key_id, no_keyring=self.keyring is None)
            expected = key.witness_mac(message).hex()
        return hmac.compare_digest(expected, str(digest))


#: the largest body a record may decompress to (a defence against decompression bombs)
_MAX_BODY = 1 << 31


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
#: the tag key of a typed value, as msgpack packs it (:attr:`Format.marker`)
#: (a body may hold these only if it holds a ``$``: checked as ``body.find(b"$") >= 0``,
#: not ``b"$" in body``, which first tries ``b"$"`` as an int and formats and clears a
#: TypeError, ~1.8k instructions per check: 4 % of each replayed event, callgrind)
_MSGPACK_TAG = b"\xa2$t"
_JSON_TAG = b'"$t"'
#: the bytes a plain append's body starts with (:meth:`Codec.decode_chain`, ``appends``);
#: in a stored record they start at 35 and the pointer at 63
_APPEND_HEAD = b'{"ops":[{"op":"add","path":"'
_new_tuple = tuple.__new__
_orjson_loads = orjson.loads
_join = b"".join
_digest = methodcaller("digest")
#: a plain append's whole body (from 35 in a stored record), as :func:`_append_run`
#: takes it: the pointer (no ``"``, ``\\`` or ``$``) and the value (no ``$``: no typed
#: value), the body ending right after the value
_APPEND_BODY = re.compile(rb'\{"ops":\[\{"op":"add","path":"([^"\\$]*)","value":([^$]*)\}\]\}\Z')


def _append_run(
    agent_id: str, events: Sequence[EventRow], link: bytes
) -> tuple[str | list[str], list[Any], bytes] | None:
    """The pointer(s), appended values and last link of a run of stored events that are
    all plain SHA-256 appends (:meth:`Codec.decode_chain`'s ``appends`` case) following
    ``link``, decoded in one pass per step over the whole run instead of one record at
    a time: one pointer (a ``str``) when every record appends to the same list (a
    chat's), else each record's; None when any record is anything else or does not
    verify (the caller then decodes the run record by record, which says what is wrong
    and where).

    Each step is one C-level ``map`` over the run (no Python per record): the body's
    shape (the first record's matched once by :data:`_APPEND_BODY`, the others compared
    with its bytes up to the value, and their ends), the SHA-256 of each link input, one
    comparison of the digests with the checksums, the header and chain link of each, one
    ``$`` search (no typed value) and one ``orjson.loads`` of all the appended values
    joined into one JSON array (docs/benchmarks.md, "coldk"; the comprehensions this
    replaced ran ~1 µs of Python per record). The values are joined with ``,\\n``: a
    value that is not one JSON value by itself cannot make the array parse as the same
    number of elements by running into the next one through a string (a raw newline
    inside a JSON string is refused), and any other miscount falls back. Used only
    without a key (with a key the records are authenticated one by one by AES-GCM;
    without one, a checksum binds each record's bytes, which the batched parse reads
    unchanged).
    """
    try:
        seqs, types, stamps, payloads, checksums = zip(*events, strict=True)
        found = _APPEND_BODY.match(payloads[0], 35)
        if found is None:  # (not a chat's run: no work wasted)
            return None
        n, begin = len(payloads), found.start(2)
        pointer: str | list[str]
        if all(map(bytes.startswith, payloads, repeat(payloads[0][35:begin], n), repeat(35, n))):
            if not all(map(bytes.endswith, payloads, repeat(b"}]}", n))):
                return None
            pointer = found[1].decode()  # (checked once: no ``"``, ``\\`` or ``$``)
            parts = list(map(bytes.__getitem__, payloads, repeat(slice(begin, -3), n)))
        else:  # appends to more than one list
            maybe = list(map(_APPEND_BODY.match, payloads, repeat(35, n)))
            if None in maybe:
                return None
            matched = cast("list[re.Match[bytes]]", maybe)
            pointer = [m[1].decode() for m in matched]
            parts = [m[2] for m in matched]
        if types.count(types[0]) != n:  # (the link input below names the first's type)
            return None
        prefix = b"sk-link/1" + _names(agent_id, types[0])
        inputs = map(
            _join, zip(repeat(prefix, n), map(_seq_ts.pack, seqs, stamps), payloads, strict=True)
        )
        digests = list(map(_digest, map(hashlib.sha256, inputs)))
        if digests != list(checksums):
            return None
        if not (
            all(map(bytes.startswith, payloads, repeat(_SHA_JSON, n)))
            and all(map(bytes.startswith, payloads, (link, *digests), repeat(3, n)))
        ):
            return None
        parts[0] = b"[" + parts[0]
        parts[-1] += b"]"
        joined = b",\n".join(parts)
        if joined.find(b"$") >= 0:  # (a typed value, or a ``$`` in a string)
            return None
        values = _orjson_loads(joined)
        if type(values) is not list or len(values) != n:
            return None
        return pointer, values, digests[-1]
    except (TypeError, ValueError):  # (not bytes, not JSON, not UTF-8: record by record)
        return None


#: a run of at most this many events is checked by :func:`_append_few` (a loop), a
#: longer one by :func:`_append_run` (C-level passes over the run): the passes' fixed
#: cost is ~7 us of CPU, a record's ~2.5 us, so below ~16 records the loop is cheaper
#: (CPU: 2 events 5.5 against 10.3 us, 7: 17.8 against 21.3, 16: equal, 40: 101
#: against 89; instructions: 2 events 69k against 106k, 7: 231k / 253k, 12: 397k /
#: 402k, 16: equal, 24: 783k / 756k), and a load past a tail snapshot replays at most
#: 7 (docs/benchmarks.md, "cold3")
FEW_APPENDS = 12


def _append_few(
    agent_id: str, events: Sequence[EventRow], link: bytes
) -> tuple[str, list[Any], bytes] | None:
    """:func:`_append_run` of a short run, record by record: the pointer, the values
    and the last link when every stored event is a plain SHA-256 append to the same
    list following ``link`` (each one's header and chain link, the checksum of its link
    input, its body's shape matched whole by :data:`_APPEND_BODY` (no ``$``: no typed
    value), its value parsed as one JSON value), else None: :func:`_append_one`'s
    checks for each record (docs/benchmarks.md, "cold3")."""
    try:
        prefix = pointer = b""
        run_type: str | None = None  # (the event type ``prefix`` names)
        values: list[Any] = []
        for seq, record_type, timestamp, payload, checksum in events:
            if not payload.startswith(_SHA_JSON + link):
                return None
            found = _APPEND_BODY.match(payload, 35)
            if found is None:
                return None
            if not prefix:
                pointer = found[1]
            elif found[1] != pointer:
                return None  # (appends to more than one list)
            if record_type != run_type:
                prefix, run_type = b"sk-link/1" + _names(agent_id, record_type), record_type
            link = hashlib.sha256(
                b"".join((prefix, _seq_ts.pack(seq, timestamp), payload))
            ).digest()
            if link != checksum:
                return None
            values.append(_orjson_loads(found[2]))
        if not prefix:
            return None
        return pointer.decode(), values, link
    except (TypeError, ValueError, AttributeError, struct.error):  # (record by record)
        return None


def _append_one(agent_id: str, row: EventRow, link: bytes) -> tuple[str, list[Any], bytes] | None:
    """:func:`_append_run` of one stored event: its pointer, ``[value]`` and link when it
    is a plain SHA-256 append following ``link`` (the header and chain link, the
    checksum of its link input, the body's shape matched whole by :data:`_APPEND_BODY`
    (no ``$``: no typed value), the value parsed as one JSON value), else None."""
    try:
        seq, record_type, timestamp, payload, checksum = row
        if not payload.startswith(_SHA_JSON + link):
            return None
        found = _APPEND_BODY.match(payload, 35)
        if found is None:
            return None
        digest = hashlib.sha256(
            b"".join(
                (b"sk-link/1", _names(agent_id, record_type), _seq_ts.pack(seq, timestamp), payload)
            )
        ).digest()
        if digest != checksum:
            return None
        return found[1].decode(), [_orjson_loads(found[2])], digest
    except (TypeError, ValueError, AttributeError, struct.error):  # (record by record)
        return None


def _stored_checksum(link: bytes, payload: bytes, algo: int) -> bytes:
    """The checksum of an unencrypted record that is not stored as its canonical
    plaintext (compressed, or a converted legacy record): its link and its bytes, hashed
    with the record's algorithm (its header bit ``algo``)."""
    return _HASHES[algo >> 6](b"".join((b"sk-stored/1", link, payload))).digest()


def _unkeyed_tag(agent_id: str, seq: int, link: bytes) -> bytes:
    return b"\x01\x00" + link


def _head_message(domain: bytes, agent_id: str, seq: int, link: bytes) -> bytes:
    return b"".join((domain, _prefixed(agent_id), _head_seq.pack(seq), link))


def _invalid_tag() -> type[Exception]:
    # imported on first use: cryptography is only needed by stores with a key
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "compression='zstd' needs the zstandard package: pip install zstandard"
        ) from exc
    return zstandard
