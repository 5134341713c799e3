"""Rebuilding a projection from the agents' current states, when the feed was trimmed.

Retention (or ``trim_feed``) removes the start of the change feed: a rebuild cannot
replay it from position 0. A projection that can say what its read model holds for an
agent from the agent's current state alone (:meth:`Projection.seed
<statekeeper.feed.Projection.seed>`: ``agent_states``, ``agent_activity``) is rebuilt
in two steps instead:

1. **seeding** (state ``seeding``): every agent's latest state, a page at a time
   (``list_agents`` + ``get_many``), is given to ``seed``; in the same transaction the
   page's agents and the seqs of those states are recorded in
   ``sk_projection_seeds``. Interrupted, it resumes after the last agent recorded.
2. **the feed from its floor** (state ``rebuilding``): every event still in the feed,
   from the floor found before seeding, except an agent's events at or below the seq
   of the state it was seeded from (that state holds them already). So each event is
   in the read model exactly once, whatever was written while seeding: an event
   committed before an agent's state was read is in that state, one committed after
   has a larger seq and comes from the feed. An agent created during seeding has no
   seed: all its events come from the feed. The seeds are dropped when the rebuild
   ends (every later event has a larger seq).

No feed position has to be matched to the states read (on PostgreSQL positions commit
out of order): the per-agent seq is what decides.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import Snapshot
from .projection import Projection

if TYPE_CHECKING:
    from .runner import ProjectionRunner

__all__ = ["PAGE", "SEEDS", "forget_seed", "has_seeds", "seed_all", "seeded_seq"]

SEEDS = """
CREATE TABLE IF NOT EXISTS sk_projection_seeds (
    name     TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (name, agent_id)
) WITHOUT ROWID
"""

#: agents read (and seeded, in one transaction) at a time
PAGE = 500


def has_seeds(db: sqlite3.Connection, name: str) -> bool:
    """Whether projection ``name`` is being rebuilt from seeds (see the module)."""
    row = db.execute("SELECT 1 FROM sk_projection_seeds WHERE name = ? LIMIT 1", (name,))
    return row.fetchone() is not None


def forget_seed(db: sqlite3.Connection, name: str, agent_id: str) -> None:
    """The agent was deleted: its seed no longer covers any event of the id."""
    db.execute("DELETE FROM sk_projection_seeds WHERE name = ? AND agent_id = ?", (name, agent_id))


def seeded_seq(db: sqlite3.Connection, name: str, agent_id: str) -> int:
    """The seq of the state agent ``agent_id`` was seeded from (0: not seeded)."""
    row = db.execute(
        "SELECT seq FROM sk_projection_seeds WHERE name = ? AND agent_id = ?", (name, agent_id)
    ).fetchone()
    return 0 if row is None else int(row[0])


def _last_seeded(db: sqlite3.Connection, name: str) -> str | None:
    row = db.execute("SELECT max(agent_id) FROM sk_projection_seeds WHERE name = ?", (name,))
    found = row.fetchone()
    return None if found is None else found[0]


def _seed_page(db: sqlite3.Connection, projection: Projection, states: Sequence[Snapshot]) -> None:
    """One transaction: each state seeded into the read model, and recorded."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for state in states:
            projection.seed(db, state)
            db.execute(
                "INSERT INTO sk_projection_seeds VALUES (?, ?, ?)"
                " ON CONFLICT (name, agent_id) DO UPDATE SET seq = excluded.seq",
                (projection.name, state.agent_id, state.seq),
            )
        db.execute("UPDATE sk_projections SET updated_at = ? WHERE name = ?",
                   (time.time(), projection.name))  # fmt: skip
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _seeded(db: sqlite3.Connection, name: str) -> None:
    db.execute("UPDATE sk_projections SET state = 'rebuilding' WHERE name = ?", (name,))


async def seed_all(runner: ProjectionRunner, projection: Projection) -> int:
    """Seed ``projection`` from every agent's latest state (resuming after the last
    agent recorded), then mark it ``rebuilding``; returns the agents seeded (this run)."""
    name = projection.name
    store = runner.store
    after = await runner._in_db(_last_seeded, name)
    seeded = 0
    while True:
        page = await store.list_agents(after=after, limit=PAGE)
        if not page:
            break
        states = [s for s in await store.get_many([i.agent_id for i in page]) if s is not None]
        await runner._in_db(_seed_page, projection, states)
        seeded += len(states)
        after = page[-1].agent_id
        if len(page) < PAGE:
            break
    await runner._in_db(_seeded, name)
    return seeded
