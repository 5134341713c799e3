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

One format, written and read by parts of one job each (this module assembles
:class:`Codec` from them and re-exports their names): the layout's constants and
:class:`Header` / :class:`Sealed` / :class:`Opened` (``layout.py``), links and
checksums (``links.py``), the codec's configuration and documents (``options.py``),
compression (``compression.py``), sealing and the save paths' bound sealers
(``sealing.py``), opening and the version-0 reader (``opening.py``), decoding into
documents and the replay paths (``decoding.py``) with the plain-append fast path
(``appends.py``), stream head tags and witnesses (``heads.py``), and the deprecated
keyword names (``renamed.py``).
"""

from __future__ import annotations

import copy

# every name this module held before it was split (issue 11), from where it lives now
from .appends import _APPEND_BODY as _APPEND_BODY
from .appends import _APPEND_HEAD as _APPEND_HEAD
from .appends import FEW_APPENDS as FEW_APPENDS
from .appends import _append_few as _append_few
from .appends import _append_one as _append_one
from .appends import _append_run as _append_run
from .appends import _digest as _digest
from .appends import _join as _join
from .compression import _MAX_BODY as _MAX_BODY
from .decoding import Decoding
from .heads import HeadTags
from .heads import _head_message as _head_message
from .heads import _unkeyed_tag as _unkeyed_tag
from .layout import _CHECKSUM_NAMES as _CHECKSUM_NAMES
from .layout import _COMPRESSION_NAMES as _COMPRESSION_NAMES
from .layout import _COMPRESSIONS as _COMPRESSIONS
from .layout import _FP as _FP
from .layout import _GCM_TAG as _GCM_TAG
from .layout import _JSON_TAG as _JSON_TAG
from .layout import _MSGPACK_TAG as _MSGPACK_TAG
from .layout import _NONCE as _NONCE
from .layout import _RESERVED as _RESERVED
from .layout import BLAKE3_FROM as BLAKE3_FROM
from .layout import CHAIN_BROKEN as CHAIN_BROKEN
from .layout import CHECKSUMS as CHECKSUMS
from .layout import COMPRESS_NONE as COMPRESS_NONE
from .layout import COMPRESS_ZSTD as COMPRESS_ZSTD
from .layout import COMPRESS_ZSTD_DICT as COMPRESS_ZSTD_DICT
from .layout import DEFAULT_CHECKSUM as DEFAULT_CHECKSUM
from .layout import FLAG_BLAKE3 as FLAG_BLAKE3
from .layout import FLAG_DATA_KEY as FLAG_DATA_KEY
from .layout import FLAG_LEGACY_LINK as FLAG_LEGACY_LINK
from .layout import VERSION as VERSION
from .layout import ZERO_LINK as ZERO_LINK
from .layout import Header as Header
from .layout import Opened as Opened
from .layout import Sealed as Sealed
from .layout import _head_seq as _head_seq
from .layout import _ident_head as _ident_head
from .layout import _new_tuple as _new_tuple
from .layout import _orjson_loads as _orjson_loads
from .layout import _seq_ts as _seq_ts
from .links import _B3_JSON as _B3_JSON
from .links import _CANON as _CANON
from .links import _HASHES as _HASHES
from .links import _PLAIN_ANY as _PLAIN_ANY
from .links import _PLAIN_JSON as _PLAIN_JSON
from .links import _SHA_JSON as _SHA_JSON
from .links import _Hash as _Hash
from .links import _Hasher as _Hasher
from .links import _link as _link
from .links import _names as _names
from .links import _plain_link as _plain_link
from .links import _prefixed as _prefixed
from .links import _stored_checksum as _stored_checksum
from .links import identity as identity
from .links import legacy_checksum as legacy_checksum
from .opening import _invalid_tag as _invalid_tag
from .options import _Local as _Local
from .options import _zstd as _zstd
from .renamed import _renamed_keywords as _renamed_keywords
from .sealing import Sealing

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


class Codec(Sealing, Decoding, HeadTags):
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

    def migrating(self) -> Codec:
        """A copy of this codec that also *reads* records and heads written without a key
        (it still writes with the active key). For ``rekey`` only, which converts a
        store to encryption; never use it to serve reads."""
        other = copy.copy(self)
        other._local = _Local()
        other._compressors = []
        other._strict = False
        return other
