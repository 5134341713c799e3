"""The S3 backend's rewrite (:mod:`statekeeper.backends.s3`) and a prune landing under
it: a snapshot the rewrite carries below the new base is never left stored.

A rewrite refuses a snapshot below the stream's base
(:mod:`statekeeper.backends.pruned_snapshots`), read from the commits it listed; S3
has no atomic step over that listing and the writes after it, and a prune does not
wait for a rewrite's claim. A prune that switched the base and deleted the snapshots
below it between the two had the rewrite write the snapshot back: an object of the
pruned state (maybe personal data retention removed) stored again below the base —
hidden from reads, kept until a later prune of the agent
(tests/backends/test_s3_rewrite_snapshot_prune.py).

Now :func:`drop_pruned_snapshots` runs after the rewrite's writes (and after a rewrite
that failed): the commits listed once more, each snapshot of the request below the base
then is deleted (every version, on a versioned bucket). A prune whose switch (its base
object) that listing does not see made the switch after it, so after the snapshot was
written — and a prune lists the snapshots to delete after its switch: it finds the one
written and deletes it itself. Either way none is left. The rewrite is then one made
before the prune (its other records as they were rewritten, the snapshot the prune's
to remove). The cost: one LIST, only for a rewrite carrying a snapshot below its head
(the base never passes the head); rekey carries every snapshot of an agent in its last
rewrite: one LIST per agent re-encrypted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...records import RewriteRequest

__all__ = ["drop_pruned_snapshots"]


class _Engine(Protocol):  # (the S3 backend's parts used here)
    def _commits(self, agent_id: str) -> list[int]: ...

    def _snapshot_key(self, agent_id: str, seq: int) -> str: ...

    def _delete_keys(self, keys: Sequence[str]) -> None: ...


def drop_pruned_snapshots(engine: _Engine, request: RewriteRequest) -> None:
    """Delete each snapshot of ``request`` (its writes made, or cut short) below the
    stream's base as listed now (see the module documentation)."""
    if not any(snap.seq < request.expected_seq for snap in request.snapshots):
        return
    commits = engine._commits(request.agent_id)
    if not commits:
        return  # (deleted meanwhile: a delete removes the snapshots with the stream)
    base = commits[0] - 1  # (the live commits begin after the base)
    agent_id = request.agent_id
    pruned = sorted({snap.seq for snap in request.snapshots if snap.seq < base})
    engine._delete_keys([engine._snapshot_key(agent_id, seq) for seq in pruned])
