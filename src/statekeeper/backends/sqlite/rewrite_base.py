"""SQLite's refusal of a rewrite's snapshot below the stream's pruned base
(:mod:`.pruned_snapshots`), read in the rewrite's write transaction."""

from __future__ import annotations

from collections.abc import Sequence

from ...records import RewriteRequest
from ..pruned_snapshots import lowest_pruned_snapshot, pruned_snapshot_rewrite
from .base import Executes

__all__ = ["check_snapshots_stored"]


def check_snapshots_stored(conn: Executes, requests: Sequence[RewriteRequest]) -> None:
    """Raise :func:`~.pruned_snapshots.pruned_snapshot_rewrite` for the first of
    ``requests`` (their heads checked, nothing written yet) carrying a snapshot below
    its stream's base (the seq before its first stored event), read in the caller's
    transaction: one query per 500 agents, only for the requests with a snapshot below
    their head (a stream's base is always below its head)."""
    named = [r for r in requests if any(s.seq < r.expected_seq for s in r.snapshots)]
    bases: dict[str, int] = {}
    agents = sorted({r.agent_id for r in named})
    for start in range(0, len(agents), 500):
        chunk = agents[start : start + 500]
        marks = ",".join("?" * len(chunk))
        # (a correlated min per agent: an index seek each, not a scan of the streams)
        for agent_id, first in conn.execute(
            "SELECT agent_id, (SELECT min(seq) FROM sk_events e WHERE e.agent_id = a.agent_id)"
            f" FROM sk_agents a WHERE agent_id IN ({marks})",
            chunk,
        ):
            if first is not None:
                bases[agent_id] = int(first) - 1
    for r in named:
        base = bases.get(r.agent_id, r.expected_seq)  # (no event stored: all pruned)
        seq = lowest_pruned_snapshot(r, base)
        if seq is not None:
            raise pruned_snapshot_rewrite(r.agent_id, seq, base)
