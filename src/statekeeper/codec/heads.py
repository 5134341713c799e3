"""Stream head tags (the authenticated head of a stream) and witness digests and
seals: what commits to a whole stream, keyed by the master key when there is one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from hmac import compare_digest as _compare_digest
from typing import TYPE_CHECKING

from ..errors import (
    IntegrityError,
    KeyNotFound,
)
from . import layout
from .links import (
    _prefixed,
)
from .options import CodecOptions

if TYPE_CHECKING:
    pass

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_head_seq = layout._head_seq


class HeadTags(CodecOptions):
    """Head tags and witnesses of streams."""

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


def _unkeyed_tag(agent_id: str, seq: int, link: bytes) -> bytes:
    return b"\x01\x00" + link


def _head_message(domain: bytes, agent_id: str, seq: int, link: bytes) -> bytes:
    return b"".join((domain, _prefixed(agent_id), _head_seq.pack(seq), link))
