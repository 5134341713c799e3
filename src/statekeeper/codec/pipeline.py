"""The codec: how a record becomes stored bytes and comes back verified.

A record goes through two steps each way::

    value ──serialize──► plaintext ──seal──► (stored bytes, tag)     (write)
    value ◄─deserialize─ plaintext ◄─open─── (stored bytes, tag)     (read, verified)

``seal``/``open`` bind the bytes to the record's identity — agent id, seq and record
kind — so a payload copied to another agent or another position fails verification,
not only a payload with flipped bits.

This base codec stores the plaintext as is and seals it with SHA-256. That detects
accidental corruption (bit rot, torn writes, a bad copy); it does **not** stop someone
who can rewrite the file, since a plain hash can be recomputed. A keyed codec (AES-GCM)
replaces ``seal``/``open`` to defend against that.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

from ..errors import IntegrityError
from . import serializer

__all__ = ["Codec"]


class Codec:
    """Serialize → seal on write; open (verify) → deserialize on read."""

    name = "json+sha256"

    def serialize(self, value: Any, root: str = "value") -> bytes:
        """Turn a JSON document into bytes; raises ``SerializationError`` naming the path."""
        return serializer.dumps(value, root)

    def deserialize(self, plaintext: bytes, agent_id: str = "*", seq: int | None = None) -> Any:
        """Parse bytes made by :meth:`serialize`; raises ``IntegrityError`` if unreadable."""
        try:
            return orjson.loads(plaintext)
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc

    def tag(self, agent_id: str, seq: int, kind: str, payload: bytes) -> bytes:
        """SHA-256 over the record's identity and its stored bytes."""
        header = b"%s\x00%d\x00%s\x00" % (agent_id.encode(), seq, kind.encode())
        return hashlib.sha256(header + payload).digest()

    def seal(self, agent_id: str, seq: int, kind: str, plaintext: bytes) -> tuple[bytes, bytes]:
        """Return ``(stored_bytes, tag)`` for a serialized record."""
        return plaintext, self.tag(agent_id, seq, kind, plaintext)

    def open(self, agent_id: str, seq: int, kind: str, stored: bytes, tag: bytes) -> bytes:
        """Verify a stored record and return its plaintext; raises ``IntegrityError``."""
        if not isinstance(stored, bytes | bytearray | memoryview) or not isinstance(
            tag, bytes | bytearray | memoryview
        ):
            # e.g. a row rewritten as TEXT by hand: never ours, never trusted
            raise IntegrityError(agent_id, seq, f"{kind} record is not stored as bytes")
        if type(stored) is not bytes:
            stored = bytes(stored)
        if not hmac.compare_digest(self.tag(agent_id, seq, kind, stored), tag):
            raise IntegrityError(agent_id, seq, f"{kind} record checksum mismatch")
        return stored

    def encode(
        self,
        agent_id: str,
        seq: int,
        kind: str,
        value: Any,
        root: str = "value",
    ) -> tuple[bytes, bytes]:
        """Serialize and seal in one step."""
        return self.seal(agent_id, seq, kind, self.serialize(value, root))

    def decode(self, agent_id: str, seq: int, kind: str, stored: bytes, tag: bytes) -> Any:
        """Open and deserialize in one step."""
        return self.deserialize(self.open(agent_id, seq, kind, stored, tag), agent_id, seq)
