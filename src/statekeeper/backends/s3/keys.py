"""Where an agent's objects live: its root (``<prefix>/a/<hex id>/``, an id too long
for S3's key limit refused there), the names of its commits, snapshots and key
objects, and the longest key written for an id (what bounds an id's length)."""

from __future__ import annotations

import hashlib

from ...errors import InvalidAgentId
from .base import _MARK, MAX_KEY_BYTES
from .engine import S3Engine
from .layout import _WIDTH

__all__ = ["S3Keys"]


class S3Keys(S3Engine):
    """An agent's object keys (a part of :class:`~.backend.S3Backend`)."""

    def _agent_root(self, agent_id: str) -> str:
        """Every key of the agent's objects starts with this: an id too long for S3's
        key limit is refused here, before anything is written under it."""
        hexid = agent_id.encode().hex()
        if len(hexid) > 2 * self.max_id_bytes:
            shown = repr(agent_id if len(agent_id) <= 40 else agent_id[:40] + "…")
            longest = len(self.longest_key(agent_id).encode())
            raise InvalidAgentId(
                f"agent_id {shown} is {len(hexid) // 2:,} bytes in UTF-8, over the limit"
                f" of {self.max_id_bytes:,} of this S3 store: its longest object key would"
                f" be {longest:,} bytes, over S3's"
                f" {MAX_KEY_BYTES:,} (prefix {self.prefix!r}, the id hex-encoded)"
            )
        return self._root + hexid + "/"

    def agent_keys(self, agent_id: str) -> list[str]:
        """The longest key of each kind this backend ever writes for ``agent_id``:
        a commit, a compacted stream's base, a snapshot (at the largest seq), an
        idempotency key (its hash: every key is as long) and the high-water mark."""
        root = self._root + agent_id.encode().hex() + "/"
        seq = self._seq_name(10**_WIDTH - 1)
        return [
            root + "e/" + seq,
            root + "e/b" + seq,
            root + "s/" + seq,
            root + "k/" + self._key_hash(""),
            root + _MARK,
        ]

    def longest_key(self, agent_id: str) -> str:
        """The longest object key written for ``agent_id`` (see :meth:`agent_keys`)."""
        return max(self.agent_keys(agent_id), key=lambda k: len(k.encode()))

    @staticmethod
    def _seq_name(seq: int) -> str:
        return f"{seq:0{_WIDTH}d}"

    @staticmethod
    def _key_hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()
