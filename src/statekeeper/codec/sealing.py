"""Sealing a record: compress, encrypt and link it (:meth:`Codec.seal`), and the
sealers bound once for the save paths that write records of one kind.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from ..errors import (
    ConfigurationError,
)
from . import layout
from .compression import Compression
from .datakeys import uses_data_key
from .formats import JSON, MSGPACK
from .layout import (
    _GCM_TAG,
    _NONCE,
    BLAKE3_FROM,
    CHECKSUMS,
    COMPRESS_NONE,
    FLAG_BLAKE3,
    FLAG_DATA_KEY,
    FLAG_LEGACY_LINK,
    VERSION,
    ZERO_LINK,
    Sealed,
    _new_tuple,
)
from .links import (
    _CANON,
    _HASHES,
    _link,
    _names,
    _stored_checksum,
    legacy_checksum,
)
from .renamed import _renamed_keywords, deprecated
from .widehash import wide_blake3 as _wide_blake3

if TYPE_CHECKING:
    pass

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_seq_ts = layout._seq_ts


class Sealing(Compression):
    """Serialize -> compress -> encrypt -> link, on write."""

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
