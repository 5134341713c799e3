"""Reading the store's legal holds, and the refusal every purge makes of a held agent.

The holds are placed and released by :mod:`statekeeper.governance.holds` (audited,
``admin`` only); they are records of a stream of the store's own
(:data:`~statekeeper.arguments.HOLDS_STREAM`, hidden from listings), sealed and chained
by the store's codec like an agent's stream. This module, below the governance layer,
reads them: the store's :meth:`~statekeeper.store.StateStore.delete` refuses a held
agent with :class:`~statekeeper.errors.AgentOnHold`, whoever calls it.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..arguments import HOLDS_STREAM, check_agent_id
from ..errors import AgentOnHold, IntegrityError, InvalidArgument
from ..namespaces import namespace_of

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "HOLDS_MARKER",
    "HOLD_ADD",
    "HOLD_REMOVE",
    "Hold",
    "check_pattern",
    "find_hold",
    "list_holds",
    "read_holds",
    "refuse_if_held",
]

#: the record types of the holds stream: a hold placed, a hold released
HOLD_ADD = "hold.add"
HOLD_REMOVE = "hold.remove"
#: the store-level marker set once the holds stream's first record is committed: a
#: store that has it and no holds stream lost its holds (the stream deleted whole,
#: rows removed from the database), which every purge then refuses to take as "none"
HOLDS_MARKER = "legal-holds"
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Hold:
    """One legal hold: ``pattern`` is an agent id or ``NAMESPACE/*`` (full ids, as in a
    retention policy file); ``reason`` the matter it is for; ``principal`` who placed it
    (None: a store opened without one) and ``at`` when (epoch seconds). A hold a
    restore carried over from a backup into a store that lacked it keeps its placing
    (reason, principal, time) and names the backup in ``restored_from``."""

    pattern: str
    reason: str
    principal: str | None = None
    at: float = 0.0
    restored_from: str | None = None

    def covers(self, agent_id: str) -> bool:
        """Whether the hold exempts ``agent_id`` (a stored, full id)."""
        if self.pattern.endswith("/*"):
            return namespace_of(agent_id) == self.pattern[:-2]
        return agent_id == self.pattern


def check_pattern(pattern: object) -> str:
    """``pattern`` if it names one agent or ``NAMESPACE/*``, else
    :class:`~statekeeper.errors.InvalidArgument`."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgument("pattern", "a hold names an agent id or NAMESPACE/*")
    if pattern.endswith("/*"):
        namespace = pattern[:-2]
        if not namespace or "*" in namespace:
            raise InvalidArgument(
                "pattern", f"hold {pattern!r}: NAMESPACE/* needs a namespace without '*'"
            )
        check_agent_id(namespace, "pattern")
        return pattern
    if "*" in pattern:
        raise InvalidArgument(
            "pattern", f"hold {pattern!r}: '*' only as the last part, as in legal/*"
        )
    return check_agent_id(pattern, "pattern")


#: per backend: the holds read at a head (seq, tag), so that a purge costs one head read
#: while the holds do not change
_READ: weakref.WeakKeyDictionary[Any, tuple[int, bytes | None, tuple[Hold, ...]]] = (
    weakref.WeakKeyDictionary()
)


async def list_holds(store: StateStore) -> tuple[Hold, ...]:
    """The holds in force, in the order they were placed. Every record is opened and
    its chain and head checked (:class:`~statekeeper.errors.IntegrityError` otherwise:
    a purge then fails rather than guess)."""
    backend = store.backend
    seq, tag = await backend.head_tag(HOLDS_STREAM)
    if seq == 0:
        if await backend.read_marker(HOLDS_MARKER):
            raise IntegrityError(
                HOLDS_STREAM,
                0,
                "the legal holds are missing: the store is marked as keeping them (set "
                "with their first record), so their records were deleted; every purge is "
                "refused until they are placed again ('statekeeper hold add', from the "
                "audit log's hold entries or a backup)",
            )
        return ()
    try:
        known = _READ.get(backend)
    except TypeError:  # a backend that cannot be weakly referenced: read every time
        known = None
    if known is not None and known[0] == seq and known[1] == tag:
        return known[2]
    holds, _ = await read_holds(store, seq, tag)
    with contextlib.suppress(TypeError):  # (not weakly referable: not cached)
        _READ[backend] = (seq, tag, holds)
    return holds


async def read_holds(
    store: StateStore, seq: int, tag: bytes | None
) -> tuple[tuple[Hold, ...], bytes]:
    """The holds folded from the records up to ``seq`` (the head read with ``tag``),
    and the chain's link at ``seq``."""
    from ..codec.pipeline import ZERO_LINK

    codec = store.codec
    backend = store.backend
    active: dict[str, Hold] = {}
    link = ZERO_LINK
    after = 0
    while after < seq:
        page = await backend.read(HOLDS_STREAM, after, seq, limit=_PAGE)
        if not page:
            break
        for raw in page:
            if raw.seq != after + 1:
                raise IntegrityError(HOLDS_STREAM, after + 1, "a legal hold record is missing")
            opened = codec.open(
                HOLDS_STREAM, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
            )
            if opened.prev is not None and opened.prev != link:
                raise IntegrityError(HOLDS_STREAM, raw.seq, "the legal hold records' chain breaks")
            link = opened.link
            doc = codec.deserialize(opened.body, HOLDS_STREAM, raw.seq, fmt=opened.format)
            if not isinstance(doc, dict) or not isinstance(doc.get("pattern"), str):
                raise IntegrityError(HOLDS_STREAM, raw.seq, "a legal hold record names no pattern")
            pattern = doc["pattern"]
            if raw.type == HOLD_ADD:
                principal = doc.get("principal")
                placed = doc.get("placed_at")  # (a hold carried over by a restore)
                restored = doc.get("restored_from")
                active[pattern] = Hold(
                    pattern,
                    str(doc.get("reason", "")),
                    principal if isinstance(principal, str) else None,
                    float(placed) if isinstance(placed, int | float) else raw.timestamp,
                    restored if isinstance(restored, str) else None,
                )
            elif raw.type == HOLD_REMOVE:
                active.pop(pattern, None)
            after = raw.seq
    if after != seq:
        raise IntegrityError(HOLDS_STREAM, seq, "the legal hold records end before their head")
    codec.check_head(HOLDS_STREAM, seq, link, tag)
    return tuple(active.values()), link


async def find_hold(store: StateStore, agent_id: str) -> Hold | None:
    """The hold that covers ``agent_id`` (a stored, full id), or None: one head read
    when the holds have not changed since this process last read them."""
    for hold in await list_holds(store):
        if hold.covers(agent_id):
            return hold
    return None


async def refuse_if_held(store: StateStore, agent_id: str, operation: str) -> None:
    """Raise :class:`~statekeeper.errors.AgentOnHold` when a hold of the store covers
    ``agent_id`` (its stored id). ``operation`` names the purge (``"delete"``...)."""
    hold = await find_hold(store, agent_id)
    if hold is not None:
        raise AgentOnHold(agent_id, hold.pattern, hold.reason, operation)
