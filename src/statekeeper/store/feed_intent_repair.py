"""An operator's settling of feed intents no process can prove dead
(:mod:`.feed_intents`; ``statekeeper feed-intents``).

An intent is dropped by a delete's settle only once its owner is provably gone. One
written by an earlier version (no owner) or by a process of another host, boot or
container is never proven so: while its agent is intact it stayed for ever, and
``verify`` named it on every run with no way to end it. :func:`feed_intents` lists
each intent left (its agent, owner, age and why it is kept); :func:`settle_intents`
settles those named by the operator (agents, or an age) by the rule an owner's end
would: the agent deleted (its key destroyed) — its tombstone, once; intact — the
intent dropped (its delete never happened). An intent whose owner is running on this
host (a delete under way) is refused unless ``force``; so is one of an intact agent
written less than :data:`FRESH` ago whose owner is not provably gone, when it is named
by its agent alone (no ``older_than``): a process of another host, container or version
may be deleting it right now, and its intent dropped, a crash of that process after the
delete lost the tombstone for good.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Backend
from ..backends.tiered_owner import owner_where
from ..codec import Codec
from ..errors import IntegrityError, InvalidArgument, SerializationError
from . import feed_intents as fi
from .feed_deletes import head_or_lost

__all__ = ["FRESH", "SETTLING", "FeedIntent", "SettledIntent", "feed_intents", "settle_intents"]

#: seconds an intact agent's intent whose owner is not provably gone is taken for a
#: delete possibly under way (on another host: no owner rule proves it dead), when it
#: is named by its agent alone: refused unless ``older_than`` or ``force``
FRESH = 3600.0

#: the list :func:`settle_intents` fills as it settles each intent, when set: what one
#: that then raised had written (a governed store audits it: store/governed_feed.py)
SETTLING: ContextVar[list[SettledIntent] | None] = ContextVar("feed_intents_settling", default=None)

#: why an intent of an agent still intact is kept, by where its owner is (owner_where)
_KEPT = {
    "running": "its owner is running on this host: its delete may be under way",
    "gone": "its owner is gone: the store's next delete drops it",
    "unknown": "written by an earlier version (no owner): never proven dead",
    "host": "its owner ran on another host: never proven dead",
    "boot": "its owner ran before this host's last boot: never proven dead",
    "pidns": "its owner ran in another container (pid namespace): never proven dead",
    "unprovable": "its owner's liveness cannot be looked up here: never proven dead",
}


@dataclass(frozen=True)
class FeedIntent:
    """One feed intent left (:func:`feed_intents`)."""

    #: its stream (the part after ``PENDING`` is its tombstone's idempotency key)
    stream: str
    #: the agent it deletes (forgets), the head it does so at
    agent_id: str
    head: int
    #: ``"delete"`` or ``"forget"``
    kind: str
    #: its owner as recorded (``claim_owner``), None for an earlier version's
    owner: dict[str, Any] | None
    #: when it was written (seconds since the epoch)
    written: float
    #: ``"done"`` (the agent deleted, its key destroyed: its tombstone is due),
    #: ``"intact"`` (the delete did not happen), ``"unknown"`` (a forget's, and no key
    #: vault here to tell), ``"unopened"`` (its record does not open: damaged, or
    #: written so under row-level security by a role of its namespace),
    #: ``"recreated"`` (a delete's whose agent was created again before its tombstone:
    #: none is appended, it would drop the live agent from every read model)
    state: str
    #: where its owner is (:func:`~statekeeper.backends.tiered_owner.owner_where`)
    where: str
    #: why it is kept, in words
    why: str

    @property
    def live(self) -> bool:
        """Its owner runs on this host: its operation may be under way."""
        return self.where == "running"

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.written)


@dataclass(frozen=True)
class SettledIntent:
    """What :func:`settle_intents` did with one intent: ``"tombstone"`` (appended, or
    found in the feed), ``"dropped"`` (its delete never happened), ``"refused"``
    (``reason`` says why; nothing written)."""

    intent: FeedIntent
    outcome: str
    reason: str = field(default="")


async def _describe(backend: Backend, codec: Codec, stream: str) -> FeedIntent | None:
    try:
        body = await fi._intent(backend, codec, stream)
    except (IntegrityError, SerializationError) as exc:  # (was raised outside RLS)
        why = f"does not open, which no delete settles: {exc}"
        return FeedIntent(stream, stream, 1, "delete", None, 0.0, "unopened", "unknown", why)
    if body is None:
        return None
    raws = await backend.read(stream, 0, 1)
    written = raws[0].timestamp if raws else 0.0
    agent_id, head = body["agent_id"], body["head"]
    what = "forget" if body.get("kind") == "forget" else "delete"
    owner = body.get("owner") if isinstance(body.get("owner"), dict) else None
    where = owner_where(owner, stream.encode())
    if what == "forget":
        destroyed = fi._key_destroyed(codec, agent_id)
        state = "unknown" if destroyed is None else "done" if destroyed else "intact"
    else:
        at = await backend.read(agent_id, head - 1, head)
        still = bool(at) and at[-1].seq == head and at[-1].checksum.hex() == body["checksum"]
        state = "intact" if still else "done"
        if state == "done" and await _recreated(backend, codec, stream, body):
            state = "recreated"
    if state == "recreated":
        why = RECREATED
    elif state == "done":
        gone = "its key is destroyed" if what == "forget" else "its agent is deleted"
        if await fi._announced(backend, codec, stream, body):
            # (was: "appends its tombstone"; the settle appends none: feed_intents._finish)
            why = f"{gone}, {ANNOUNCED}"
        else:
            why = f"{gone}: the store's next delete appends its tombstone"
    elif state == "unknown":
        why = "a forget's, and this process has no key vault to tell whether the key is gone"
    else:
        why = _KEPT[where]
    return FeedIntent(stream, agent_id, head, what, owner, written, state, where, why)


async def feed_intents(backend: Backend, codec: Codec) -> list[FeedIntent]:
    """Every feed intent left, by agent (nothing is written)."""
    from .keyguard import key_family

    if not await backend.count_prefix(fi.PENDING):  # (see feed_intents.settle)
        return []
    await key_family(backend, codec)  # (whose key tombstones count: _key_destroyed)
    found: list[FeedIntent] = []
    async for stream in fi._streams(backend):
        described = await _describe(backend, codec, stream)
        if described is not None:
            found.append(described)
    return sorted(found, key=lambda i: (i.agent_id, i.head, i.stream))


async def settle_intents(
    backend: Backend,
    codec: Codec,
    agent_ids: Collection[str] | None = None,
    *,
    older_than: float | None = None,
    force: bool = False,
) -> list[SettledIntent]:
    """Settle the intents of ``agent_ids`` and (or) those written more than
    ``older_than`` seconds ago (at least one is needed: :class:`InvalidArgument`) —
    their owner taken for gone: the agent deleted or its key destroyed, the tombstone
    (once: its idempotency key); intact, the intent dropped. One whose owner runs on
    this host is refused unless ``force``; a forget's this process cannot tell (no key
    vault), and one that does not open, always."""
    if agent_ids is None and older_than is None:
        raise InvalidArgument(
            "agent_ids", "name the intents to settle: agent ids, older_than, or both"
        )
    if older_than is not None and (
        isinstance(older_than, bool)
        or not isinstance(older_than, int | float)
        or math.isnan(older_than)  # (matched every intent: no age is below NaN)
        or older_than < 0
    ):
        raise InvalidArgument("older_than", f"older_than must be seconds >= 0, not {older_than!r}")
    names = None if agent_ids is None else set(agent_ids)
    now = time.time()
    noted = SETTLING.get()
    done: list[SettledIntent] = noted if noted is not None else []  # (filled as it goes)
    for intent in await feed_intents(backend, codec):
        if names is not None and intent.agent_id not in names:
            continue
        if older_than is not None and intent.age(now) < older_than:
            continue
        if intent.state in ("unknown", "unopened"):
            done.append(SettledIntent(intent, "refused", intent.why))
            continue
        if intent.live and not force:
            # (a recreated agent's is named as such: was "a delete under way", which
            # force would not have made safe to forget)
            reason = (
                f"{_RECREATED_REFUSED}; its owner is running on this host"
                if intent.state == "recreated"
                else "its owner is running on this host (a delete under way): force to settle"
            )
            done.append(SettledIntent(intent, "refused", reason))
            continue
        if _maybe_under_way(intent, now, older_than, force):
            # (was: dropped at once; its owner crashing after its delete, the
            # tombstone was lost for good)
            reason = (
                f"written {int(intent.age(now))}s ago by a process that may be deleting it"
                f" now ({intent.why}): settle it with older_than (--older-than) once it"
                " is not, or force (--force)"
            )
            done.append(SettledIntent(intent, "refused", reason))
            continue
        body = await fi._intent(backend, codec, intent.stream)
        if body is None:  # settled meanwhile (by its owner, or a delete's settle)
            continue
        if intent.kind == "delete" and await _recreated(backend, codec, intent.stream, body):
            # its tombstone now would come after the new agent's events: every read
            # model would drop a live agent (was: appended)
            if force:  # (the operator rebuilt what counts the deleted agent's events)
                await backend.delete_agent(intent.stream)
                done.append(SettledIntent(intent, "dropped", RECREATED))
                continue
            done.append(SettledIntent(intent, "refused", _RECREATED_REFUSED))
            continue
        ended = await fi._finish(backend, codec, intent.stream, body, abandoned=True)
        done.append(SettledIntent(intent, "tombstone" if ended else "dropped"))
    return done


async def _recreated(backend: Backend, codec: Codec, stream: str, body: dict[str, Any]) -> bool:
    """Was the delete intent ``stream``'s agent deleted and created again, with no
    tombstone of it since? Then no settle appends its tombstone
    (:func:`~.feed_deletes.record_unless_created`)."""
    at = await backend.read(body["agent_id"], body["head"] - 1, body["head"])
    if at and at[-1].seq == body["head"] and at[-1].checksum.hex() == body["checksum"]:
        return False  # intact
    return bool(await head_or_lost(backend, body["agent_id"])) and not await fi._announced(
        backend, codec, stream, body
    )


def _maybe_under_way(intent: FeedIntent, now: float, older_than: float | None, force: bool) -> bool:
    """An intact agent's intent named by its agent alone, younger than :data:`FRESH`,
    whose owner is not provably gone: its delete may be under way elsewhere."""
    return (
        not force
        and older_than is None
        and intent.state == "intact"
        and intent.where != "gone"
        and intent.age(now) < FRESH
    )


#: why a delete's intent whose agent was created again is kept (state ``"recreated"``)
RECREATED = (
    "its agent was deleted, then created again before its tombstone: none is appended"
    " (it would drop the live agent from every read model); a read model may keep what"
    " it derived from the deleted agent's events beside the new agent's: rebuild those"
    " that count or sum events, then settle it with force (--force)"
)

#: why :func:`settle_intents` refuses a ``"recreated"`` intent without ``force``
_RECREATED_REFUSED = (
    "its agent was deleted and created again since: its tombstone now would"
    " drop the live agent from every read model (force drops the intent,"
    " appending none)"
)

#: why a ``"done"`` intent whose agent's deletion a later tombstone announced is kept
ANNOUNCED = (
    "and a tombstone of its agent written after this intent is in the feed already:"
    " none more is appended; the store's next delete drops the intent"
)

#: what :func:`settle_command` starts with (``statekeeper verify`` names the store after
#: it: :func:`statekeeper.cli.intents.naming_the_store`)
COMMAND = "statekeeper feed-intents"


def settle_command(intent: FeedIntent) -> str:
    """The shell command that settles ``intent`` once it is older than :data:`FRESH`
    (before, it matches nothing: its delete may be under way); its agent id quoted."""
    agent = shlex.quote(intent.agent_id)
    end = f"-- {agent}" if agent.startswith("-") else agent
    return f"{COMMAND} --settle --older-than {int(FRESH // 3600)}h {end}"
