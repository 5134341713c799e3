"""Verification of stored streams: every record authenticated, the chain and the
head checked, snapshots compared with the replay of the events, idempotency records
with the events they claim (:meth:`StateStore.verify` runs it per agent)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import patch
from ..arguments import id_shape_problem
from ..backends.base import Capability
from ..codec import ZERO_LINK, Opened
from ..codec.pipeline import CHAIN_BROKEN as _CHAIN_BROKEN
from ..errors import (
    AgentForgotten,
    HistoryCompacted,
    IntegrityError,
    PatchError,
    SerializationError,
    StatekeeperError,
)
from ..records import RawEvent, RawSnapshot
from . import idempotency
from .body import snapshot_record
from .compaction import base_error
from .listing import agents_past_lost
from .state import AgentRecord, apply_payload
from .tails import BaseMissing

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "VERIFY_PAGE",
    "Problem",
    "VerifyReport",
    "in_page_order",
    "key_trouble",
    "verify_agent",
    "verify_store",
]

_PAGE = 1000

#: agents a page of ``statekeeper verify`` checks in one :meth:`StateStore.verify`: the
#: witness file is read, its marks sorted and checked once a page (once an agent made
#: a store of 10^6 agents take hours: O(agents x marks))
VERIFY_PAGE = 256


@dataclass(frozen=True, slots=True)
class Problem:
    """One verification failure found by :meth:`StateStore.verify`.

    ``kind`` says what is damaged: ``"event"``, ``"clock"`` (the head event is dated
    more than :data:`AHEAD` in the future: TTL retention cannot tell its age),
    ``"snapshot"`` (loads fall back to an
    older snapshot or a full replay; :func:`~statekeeper.store.repair.repair` rebuilds
    it), ``"head"``, ``"idempotency"`` (a record that does not match its event),
    ``"agent"`` (the agent could not be checked at all), ``"rollback"`` (the stream
    went back in time, found by the store's witness), or ``"orphan"`` (events stored
    for an agent that has no head row: no read or listing sees them; or, on Redis, of
    an agent its index does not list: no listing sees it; found when the whole store
    is verified, on engines that can tell, SQLite, PostgreSQL and Redis), or ``"feed"``
    (a delete whose feed tombstone a crash left pending, on an engine that cannot
    commit the two together: :mod:`statekeeper.store.feed_intents`; or a record of a
    feed tombstone stream, named by ``agent_id``, that does not open or is no
    tombstone: :mod:`statekeeper.store.feed_verify`).
    """

    agent_id: str
    seq: int | None
    reason: str
    kind: str = "agent"


#: what a problem's reason says when the keyring given cannot open the record
#: (:class:`~statekeeper.errors.KeyNotFound`, :class:`~statekeeper.errors.DecryptionError`
#: of other key material under the same id; idempotency records say the former too)
#: how far ahead of this clock an agent's last write may be dated and be trusted by TTL
#: retention (clocks of different hosts differ by that much)
AHEAD = 300.0

_KEY_MISSING = "which is not in the keyring"
_KEY_WRONG = "wrong key material in the keyring"


def key_trouble(problem: Problem) -> str | None:
    """``"missing"`` when ``problem`` is a record encrypted with a key the keyring given
    does not hold, ``"wrong"`` when it holds other material under the record's key id,
    None otherwise: not damage (neither ``repair`` nor a backup helps, the right key
    does)."""
    if _KEY_MISSING in problem.reason:
        return "missing"
    if _KEY_WRONG in problem.reason:
        return "wrong"
    return None


@dataclass(slots=True)
class VerifyReport:
    """What :meth:`StateStore.verify` checked and what it found."""

    agents: int = 0
    events: int = 0
    snapshots: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: idempotency records checked against their events
    keys: int = 0
    #: agents whose data key was destroyed (``statekeeper forget``): their records
    #: cannot be opened by design, which is not a problem
    forgotten: list[str] = field(default_factory=list)
    #: agents stored (by an earlier version) under an id no new agent may have (an
    #: empty, ``.`` or ``..`` segment: :func:`~statekeeper.arguments.check_new_agent_id`):
    #: readable and checked as any other, named so they can be moved to a normal id
    non_normal: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


async def verify_store(store: StateStore, agent_ids: list[str] | None) -> VerifyReport:
    """Verify every agent of ``agent_ids`` (None: all) and the witness marks of them
    (see :meth:`StateStore.verify`)."""
    report = VerifyReport()
    witnessed = await store.witness_problems(agent_ids)
    whole = agent_ids is None  # the whole store: events no head row accounts for too
    if agent_ids is None:  # (a lost agent is listed too: its check reports the loss)
        agent_ids = [
            listed.agent_id
            async for listed in agents_past_lost(store.backend.list_agents)
            # statekeeper's own streams (the audit log) are verified by their owner
            if listed.agent_id[:1] != "\x01"
        ]
    for agent_id in agent_ids:
        report.agents += 1
        if id_shape_problem(agent_id) is not None:
            report.non_normal.append(agent_id)
        start = len(report.problems)
        counted = report.events, report.snapshots, report.keys
        try:
            await verify_agent(store, agent_id, report)
        except AgentForgotten:
            del report.problems[start:]  # nothing of a shredded stream can be checked
            # nor counted as checked (its first event was, before it could not be opened)
            report.events, report.snapshots, report.keys = counted
            report.forgotten.append(agent_id)
        except StatekeeperError as exc:
            report.problems.append(Problem(agent_id, getattr(exc, "seq", None), str(exc)))
        report.problems[start:] = sorted(  # the agent's problems in seq order
            report.problems[start:], key=lambda p: (p.seq is None, p.seq or 0)
        )
    seen = {(p.agent_id, p.seq) for p in report.problems}  # one problem per place
    report.problems.extend(p for p in witnessed if (p.agent_id, p.seq) not in seen)
    if whole:
        report.problems.extend(await store.orphan_problems(agent_ids))
    return report


def in_page_order(problems: list[Problem], page: list[str]) -> list[Problem]:
    """``problems`` of one :func:`verify_store` of ``page`` grouped by agent in the
    page's order, each agent's in the order found (its own checks', then its witness
    mark's): the order a verify of each agent alone gives."""
    at = {agent_id: i for i, agent_id in reversed(list(enumerate(page)))}
    return sorted(problems, key=lambda p: at.get(p.agent_id, len(page)))


async def orphans(store: StateStore, listed: set[str]) -> list[Problem]:
    """The events of agents with no head row (``listed``: the agents with one, whose
    events above the head their own check reports), one problem per agent."""
    found = await store.backend.orphaned_events()
    problems = []
    for agent_id, first, last, count in found or ():
        if agent_id in listed or agent_id[:1] == "\x01":
            continue
        if await store.backend.head(agent_id):  # (Redis: stored, and off the agent index)
            why = (
                "of an agent the agent index does not list (no listing, verify of the whole"
                " store, export or backup sees them; left by a hand edit)"
            )
        else:
            why = (
                "stored without a head row: orphaned (no read, listing or export sees them;"
                " left by a hand edit or a damaged copy)"
            )
        problems.append(
            Problem(agent_id, first, f"{count} event(s), seq {first}..{last}, {why}", "orphan")
        )
    from .feed_intent_repair import ANNOUNCED, feed_intents, settle_command
    from .feed_verify import tombstone_problems

    problems.extend(await tombstone_problems(store))  # (the feed's tombstone streams)
    for intent in await feed_intents(store.backend, store.codec):
        if intent.state == "unopened":  # (damaged; or, under RLS, a namespace's role wrote it so)
            why = f"a feed intent that {intent.why}"
        elif intent.state == "recreated":  # (no tombstone: it would drop the live agent)
            why = f"a delete at this seq whose feed intent is left: {intent.why}"
        elif intent.state == "intact" and intent.where not in ("running", "gone"):
            why = (
                "a delete at this seq that did not happen, whose feed intent no process can"
                f" settle ({intent.why}): settle it with '{settle_command(intent)}'"
            )
        elif intent.state == "done" and intent.why.endswith(ANNOUNCED):
            # (was: "the store's next delete appends it": it appends none, see there)
            why = f"a delete at this seq whose feed intent a crash left: {intent.why}"
        else:
            why = (
                "a delete at this seq whose feed tombstone a crash left pending (or a delete"
                " under way): the store's next delete appends it, or drops it if the delete"
                " did not happen and the process that began it is provably gone"
            )
        problems.append(Problem(intent.agent_id, intent.head, why, "feed"))
    return problems


async def verify_agent(store: StateStore, agent_id: str, report: VerifyReport) -> None:
    """Check one agent and add every problem found to ``report``: a damaged record
    does not end the check — every event, snapshot and idempotency record is
    looked at (a fold that cannot go past a damaged event leaves the snapshots
    after it unchecked against the replay, but each is still authenticated)."""
    problems = report.problems
    head, head_tag = await store.backend.head_tag(agent_id)
    snapshots = await verify_snapshots(store, agent_id, report)
    record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
    folding = True  # ``record`` is the replay of every event up to record.seq
    last = 0  # the last stored seq
    link: bytes | None = ZERO_LINK  # its chain link (None: unknown)
    keys: dict[int, object] = {}  # seq -> idempotency key in the event's body
    newest = 0.0  # the time of the newest event opened
    first = await store.backend.read(agent_id, 0, None, limit=1)
    base = first[0].seq - 1 if first else 0
    if base and base in snapshots:
        # compacted by retention: the stream starts at the snapshot at its base, which
        # carries the link of the (removed) event there; the chain goes on from it.
        # Unless that snapshot is not a compaction's: the history was deleted
        error = await base_error(store._reads, agent_id, base)
        if not isinstance(error, HistoryCompacted):
            problems.append(Problem(agent_id, 1, _reason(error), "event"))
        record = snapshots.pop(base)
        last, link = base, record.link
    async for raw in raw_events(store, agent_id):
        report.events += 1
        if raw.seq != last + 1:
            problems.append(
                Problem(agent_id, last + 1, f"gap: next stored seq is {raw.seq}", "event")
            )
            folding, link = False, None
        last = raw.seq
        try:
            body, opened = store._reads.open_event(agent_id, raw)
        except (IntegrityError, SerializationError) as exc:
            problems.append(Problem(agent_id, raw.seq, _reason(exc), "event"))
            folding, link = False, None
            continue
        if "key" in body:
            keys[raw.seq] = body["key"]
        newest = raw.timestamp
        if opened.prev is not None and link is not None and opened.prev != link:
            problems.append(Problem(agent_id, raw.seq, _CHAIN_BROKEN, "event"))
            folding = False
        link = opened.link
        if not folding:
            continue
        if record.seq == 0:
            record.created_at = raw.timestamp
        try:
            apply_payload(record, raw.seq, raw.timestamp, body)
        except PatchError as exc:
            problems.append(Problem(agent_id, raw.seq, f"patch does not apply: {exc}", "event"))
            folding = False
            continue
        record.link = opened.link
        snap = snapshots.pop(raw.seq, None)
        if snap is None:
            continue
        if snap.link is not None and snap.link != record.link:
            reason = "snapshot does not belong to this stream's chain"
        elif (
            not patch._same_json(snap.data, record.data)  # strict: True, 1 and 1.0 differ
            or snap.fsm_state != record.fsm_state
        ):
            reason = "snapshot differs from the replay of the events"
        else:
            continue
        problems.append(Problem(agent_id, raw.seq, _snapshot_reason(reason), "snapshot"))
    if last == head and head and newest > time.time() + AHEAD:
        problems.append(Problem(agent_id, head, _dated_ahead(newest), "clock"))
    if last != head:
        problems.append(
            Problem(agent_id, last + 1, f"stream ends at seq {last}, head is {head}", "head")
        )
    elif link is not None:
        try:
            store.codec.check_head(agent_id, head, link, head_tag)
        except IntegrityError as exc:
            problems.append(Problem(agent_id, head, exc.reason, "head"))
    for seq in sorted(snapshots):
        if seq > last:  # no event to check them against
            problems.append(
                Problem(
                    agent_id, seq, f"snapshot at seq {seq} is past the stream's end", "snapshot"
                )
            )
    await verify_keys(store, agent_id, last, keys, report, base)


def _dated_ahead(written: float) -> str:
    return (
        f"the last write is dated {written:.3f}, in the future (a writer's clock ahead, or"
        " an edit): TTL retention cannot date it and fails on it until it is written"
        " again from a right clock"
    )


async def verify_snapshots(
    store: StateStore, agent_id: str, report: VerifyReport
) -> dict[int, AgentRecord]:
    """Every stored snapshot of the agent, decoded (those that fail are reported)."""
    opened: dict[int, tuple[RawSnapshot, dict[str, Any], Opened]] = {}
    below: int | None = None
    while True:
        raw = await store.backend.latest_snapshot(agent_id, below)
        if raw is None:
            break
        report.snapshots += 1
        try:
            body, snap_opened = store._reads.open_snapshot(agent_id, raw)
            opened[raw.seq] = (raw, body, snap_opened)
        except (IntegrityError, SerializationError) as exc:
            report.problems.append(
                Problem(agent_id, raw.seq, _snapshot_reason(_reason(exc)), "snapshot")
            )
        if raw.seq <= 1:
            break
        below = raw.seq - 1
    snapshots: dict[int, AgentRecord] = {}
    for seq in sorted(opened):
        raw, body, snap_opened = opened[seq]
        try:
            data = await store._reads.snapshot_data(agent_id, seq, body)
            snapshots[seq] = snapshot_record(agent_id, raw, body, snap_opened.prev, data)
        except BaseMissing as exc:
            if not any(exc.base < s < seq for s in snapshots):  # (replaced: tails.BaseMissing)
                report.problems.append(
                    Problem(agent_id, seq, _snapshot_reason(_reason(exc)), "snapshot")
                )
        except (IntegrityError, SerializationError) as exc:
            report.problems.append(
                Problem(agent_id, seq, _snapshot_reason(_reason(exc)), "snapshot")
            )
    return snapshots


async def raw_events(store: StateStore, agent_id: str) -> AsyncIterator[RawEvent]:
    """Every stored event of the agent in seq order, page by page, unverified."""
    cursor = 0
    while True:
        page = await store.backend.read(agent_id, cursor, None, limit=_PAGE)
        for raw in page:
            yield raw
        if len(page) < _PAGE:
            return
        cursor = page[-1].seq


async def verify_keys(
    store: StateStore,
    agent_id: str,
    last: int,
    keys: dict[int, object],
    report: VerifyReport,
    base: int = 0,
) -> None:
    """Check every idempotency record of the agent against the events it claims
    (``keys``: the key each readable event carries; ``last``: the last stored seq;
    ``base``: the stream's, below which a compaction removed the events but kept the
    records: only their stored form is checked). A backend that cannot list its
    records (no ``Capability.KEY_EXPORT``) is not checked here."""
    if not store.backend.supports(Capability.KEY_EXPORT):
        return
    for stored, first, end in await store.backend.idempotency_keys(agent_id):
        report.keys += 1
        why: str | None = None
        seq = first
        if not 1 <= first <= end <= last:
            why = f"it claims seqs {first}..{end}, which are not in the stream"
        else:
            damaged = {p.seq for p in report.problems if p.kind == "event"}
            if first <= base:
                try:
                    idempotency.check_pruned(store.codec, agent_id, stored, first)
                except IntegrityError as exc:
                    why = _reason(exc)
            for seq in range(max(first, base + 1), end + 1) if why is None else ():
                if seq in keys or seq not in damaged:  # (a damaged one is reported)
                    why = idempotency.record_problem(store.codec, agent_id, stored, keys.get(seq))
                if why is not None:
                    break
        if why is not None:
            report.problems.append(
                Problem(
                    agent_id,
                    seq,
                    f"idempotency record does not match the event it claims: {why}"
                    " (forged or damaged)",
                    "idempotency",
                )
            )


def _snapshot_reason(reason: str) -> str:
    return f"{reason}; loads fall back to an older snapshot or a full replay"


def _reason(exc: StatekeeperError) -> str:
    """An error's reason without the agent prefix (the log line names the agent)."""
    return str(getattr(exc, "reason", None) or exc)
