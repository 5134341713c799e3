"""Opening a record: verify, decrypt and decompress it (:meth:`Codec.open`), and
read its header without a key.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, overload

from ..errors import (
    DecryptionError,
    IntegrityError,
    KeyNotFound,
)
from . import layout, links
from .compression import Compression
from .formats import JSON
from .layout import (
    _CHECKSUM_NAMES,
    _FP,
    _NONCE,
    _RESERVED,
    COMPRESS_NONE,
    FLAG_BLAKE3,
    FLAG_DATA_KEY,
    FLAG_LEGACY_LINK,
    VERSION,
    Header,
    Opened,
    _new_tuple,
)
from .links import _link, _names, _stored_checksum, legacy_checksum
from .renamed import _renamed_keywords, deprecated

if TYPE_CHECKING:
    from .keys import DerivedKey

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_seq_ts = layout._seq_ts
_PLAIN_JSON = links._PLAIN_JSON


class Opening(Compression):
    """Verify -> decrypt -> decompress, on read."""

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

    def tag(self, agent_id: str, seq: int, record_type: str, payload: bytes) -> bytes:
        """The version-0 checksum of ``payload`` (kept for tools that write v0 records)."""
        return legacy_checksum(agent_id, seq, record_type, payload)


def _invalid_tag() -> type[Exception]:
    # imported on first use: cryptography is only needed by stores with a key
    from cryptography.exceptions import InvalidTag

    return InvalidTag
