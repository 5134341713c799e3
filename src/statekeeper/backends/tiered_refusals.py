"""Why a tiered write was refused or reported part-way over its hot copy: the
messages of :class:`~statekeeper.backends.tiered_writes.TieredWrites`' drops (the hot
copy dropped before a change and again after it), kept apart from the writes."""

from __future__ import annotations

from ..errors import BackendError

__all__ = ["ABSENT", "DEMOTED", "deleted_hot_copy_left", "hot_copy_kept", "hot_copy_left"]


def hot_copy_left(agent_id: str) -> BackendError:
    """A change kept the head record but its hot copy could not be dropped: another
    store sharing the hot tier checks a copy by head and head tag alone, so it would
    serve the old bytes (a prune's removed history) — was: returned as done, no error."""
    return BackendError(
        f"agent {agent_id!r} was changed in the durable tier (committed), but its hot "
        "copy could not be dropped after it (the hot tier failed or is down; another "
        "store may have filled one since the drop before the change): other stores "
        "sharing that hot tier may serve the old events until it is; this store drops "
        "it before its next hot read",
        maybe_applied=True,
    )


def hot_copy_kept(agent_id: str, change: str, why: str = "") -> BackendError:
    """A change refused before anything was written: the agent's hot copy could not be
    dropped first (``TieredWrites._drop_hot_first``); ``why`` says why one may be there
    (a delete of a demoted agent)."""
    return BackendError(
        f"{change} of agent {agent_id!r} refused, nothing changed: its hot copy could not"
        f" be dropped first (the hot tier failed or is down){why}, and other stores"
        " sharing the hot tier would serve a copy left behind as the agent; run it again"
        " once the hot tier answers"
    )


#: why a delete of an agent with no durable stream waits on its hot copy's drop all the
#: same (it writes nothing in the durable tier): no hot copy of it is provably absent
ABSENT = (
    " — no stream of the agent is in the durable tier, but a hot copy of it cannot be"
    " ruled out: one left by a delete whose drop after it failed (in this store or in"
    " another sharing the hot tier: only that one was told) or filled by a store racing"
    " that delete; with it left, an agent of that id made again to the same head"
    " without a head tag would be served it"
)

#: the same of a demoted agent (its stream in the cold tier)
DEMOTED = (
    " — the agent is demoted (its stream in the cold tier), and a hot copy of it cannot"
    " be ruled out: one filled before its demotion (dropped after it, best effort) or"
    " by a fill racing it in another store; with it left, an agent of that id made again"
    " to the same head without a head tag would be served it"
)


def deleted_hot_copy_left(agent_id: str) -> BackendError:
    """The agent was deleted, but a hot copy another store filled meanwhile may be left."""
    return BackendError(
        f"agent {agent_id!r} was deleted from the durable tier (committed), but its hot"
        " copy could not be dropped after (the hot tier failed or is down), and another"
        " store may have filled one since the drop before the delete: stores sharing the"
        " hot tier may serve it as an agent re-made to the same head; deleting again"
        " once the hot tier answers drops it",
        maybe_applied=True,
    )
