"""Agents whose hash the Redis store holds and its index does not list.

Every stored agent is in its shard's index (``<base>agents``: an append adds it, a
delete takes it off in the same script), and every listing reads the index: an agent
taken off it by hand (``ZREM``) is still read and written by id, but no listing, whole
store ``verify``, export, backup or retention sees it any more. This finds them, for
:meth:`~statekeeper.backends.base.Backend.orphaned_events`: one ``SCAN`` of the agents'
hashes per shard base, and for each batch one pipeline asking the index about each and
the hash for its event fields.
"""

from __future__ import annotations

from typing import Any

from .keys import Layout

__all__ = ["orphaned_events"]

_BATCH = 500


def _pattern(head: bytes) -> bytes:
    """A ``SCAN MATCH`` pattern of every key starting with ``head``."""
    return b"".join(b"\\" + bytes((c,)) if c in b"*?[]\\" else bytes((c,)) for c in head) + b"*"


async def _unlisted(
    client: Any, index: bytes, cut: int, keys: list[bytes]
) -> list[tuple[str, int, int, int]]:
    """The agents of ``keys`` (hashes; the id from byte ``cut`` on) that ``index`` does
    not list and that hold events, with their event seqs' range and count."""
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.zscore(index, key[cut:])
            pipe.hkeys(key)
        replies = await pipe.execute(raise_on_error=False)
    found = []
    for i, key in enumerate(keys):
        score, fields = replies[2 * i], replies[2 * i + 1]
        if score is not None or not isinstance(fields, list):
            continue  # listed (or not a hash)
        seqs = sorted(int(f[2:]) for f in map(bytes, fields) if f[:2] == b"e:")
        if seqs:
            found.append((key[cut:].decode("utf-8", "replace"), seqs[0], seqs[-1], len(seqs)))
    return found


async def orphaned_events(client: Any, layout: Layout) -> list[tuple[str, int, int, int]]:
    """``(agent_id, first seq, last seq, event count)`` of every agent with events
    stored whose shard's index does not list it, in id order."""
    found: list[tuple[str, int, int, int]] = []
    for shard in layout.shard_keys:
        head = shard.base + b"a:"
        batch: list[bytes] = []
        async for key in client.scan_iter(match=_pattern(head), count=1000):
            batch.append(bytes(key))
            if len(batch) >= _BATCH:
                found += await _unlisted(client, shard.index, len(head), batch)
                batch = []
        if batch:
            found += await _unlisted(client, shard.index, len(head), batch)
    return sorted(found)
