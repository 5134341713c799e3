"""Commitments to a stream (:meth:`StateStore.digest`) and their check
(:meth:`StateStore.check_digest`): kept outside the store, a digest detects a rollback
or a rewrite later (see :mod:`statekeeper.security.witness`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import AgentNotFound, ConfigurationError

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["StreamDigest", "check_digest", "digest"]


@dataclass(frozen=True, slots=True)
class StreamDigest:
    """A commitment to an agent's stream up to ``seq`` (see :meth:`StateStore.digest`).

    ``digest`` is keyed (HMAC with ``key_id``'s witness key) in a store with a key,
    else a SHA-256; it changes if any record up to ``seq`` changes.
    """

    agent_id: str
    seq: int
    key_id: str | None
    digest: str


async def digest(store: StateStore, agent_id: str, at_seq: int | None) -> StreamDigest:
    """The digest of ``agent_id``'s stream up to ``at_seq`` (None: the head)."""
    head, tag = await store.backend.head_tag(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    target = head if at_seq is None else at_seq
    if not 1 <= target <= head:
        raise ConfigurationError(f"seq {target} is outside 1..{head} for agent {agent_id!r}")
    link = await _link(store, agent_id, head, target, tag)
    key_id, value = store.codec.witness_digest(agent_id, target, link)
    return StreamDigest(agent_id, target, key_id, value)


async def check_digest(store: StateStore, expected: StreamDigest) -> str | None:
    """None when the stream still holds what ``expected`` committed to; else what is
    wrong."""
    agent_id = expected.agent_id
    head, tag = await store.backend.head_tag(agent_id)
    if head == 0:
        return "the stream is gone (deleted, or the store was rolled back before it existed)"
    if head < expected.seq:
        return (
            f"the stream ends at seq {head}, the witness saw seq {expected.seq}"
            " (records were removed, or the store was rolled back)"
        )
    link = await _link(store, agent_id, head, expected.seq, tag)
    if not store.codec.check_witness_digest(
        agent_id, expected.seq, link, expected.key_id, expected.digest
    ):
        return (
            f"the records up to seq {expected.seq} differ from what the witness saw"
            " (the stream was rewritten, or rolled back and written again)"
        )
    if head > expected.seq:  # the rest of the stream must still verify to its head
        await store._reads.fold(agent_id, head, head, tag, at_head=True)
    return None


async def _link(store: StateStore, agent_id: str, head: int, seq: int, tag: bytes | None) -> bytes:
    """The chain link at ``seq``, every record from the nearest snapshot verified (and
    the head tag when ``seq`` is the head)."""
    record = await store._reads.fold(agent_id, head, seq, tag, at_head=seq == head)
    if record.link is None:
        await store._snapshots.prepare(record)
    assert record.link is not None
    return record.link
