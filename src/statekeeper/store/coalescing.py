"""How the write-behind buffer (:class:`~.durability.WriteBehind`) coalesces two
consecutive appends of one agent into one."""

from __future__ import annotations

from ..records import AppendRequest

__all__ = ["merge", "mergeable"]


def mergeable(first: AppendRequest, then: AppendRequest) -> bool:
    """Two consecutive keyless appends of one agent, made under the same lease (or
    none), can be stored as one — unless both carry a snapshot: one append stores one
    snapshot, and the first may be the base a later (tail) snapshot is a delta on."""
    return (
        first.idempotency_key is None
        and then.idempotency_key is None
        and (first.snapshot is None or then.snapshot is None)
        and first.fence == then.fence
        and then.expected_seq == first.events[-1].seq
    )


def merge(first: AppendRequest, then: AppendRequest) -> AppendRequest:
    # the merged append ends where ``then`` ends: its head tag is the stream's new head
    return AppendRequest(
        first.agent_id,
        first.expected_seq,
        (*first.events, *then.events),
        then.snapshot if then.snapshot is not None else first.snapshot,
        None,
        first.fence,
        then.head_tag,
        first.expected_tag,
        first.check_tag,
    )
