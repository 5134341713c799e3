"""What each page shows, read from the store's public API (no HTML here)."""

from __future__ import annotations

import asyncio
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ..backends.base import Capability
from ..codec.types import shown
from ..concurrency.steps import STEP_KEY_PREFIX
from ..errors import AgentNotFound, HistoryCompacted, IntegrityError, InvalidArgument
from ..store.kept import kept_history
from ..store.verification import key_trouble
from .changes import Change, changes, compare, pretty
from .diagram import Graph, from_machine, observe_transitions

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..records import Event, LeaseInfo, Snapshot
    from ..store import StateStore, VerifyReport
    from ..store.verification import Problem

__all__ = [
    "JSON_OPTIONS",
    "AgentView",
    "EventRow",
    "KeysView",
    "ProblemRow",
    "TimelinePage",
    "agent_view",
    "diff_view",
    "event_detail",
    "keys_view",
    "problem_help",
    "problem_rows",
    "state_document",
    "timeline",
]

TIMELINE_PAGE = 50


@dataclass
class EventRow:
    event: Event
    size: int
    changes: list[Change]


@dataclass
class TimelinePage:
    rows: list[EventRow]
    head: int
    #: seq to page on from (older events), None when the first event is shown
    older_than: int | None
    newer_than: int | None
    #: retention compacted the history up to this seq (no older events to load)
    compacted: int | None = None
    #: the live view's new events were more than a page: seqs ``gap[0]+1 .. gap[1]``
    #: are not in ``rows`` (the page shows a row that loads them in their place)
    gap: tuple[int, int] | None = None


@dataclass
class AgentView:
    snapshot: Snapshot
    state_entered_at: float
    graph: Graph
    lease: LeaseInfo | None
    leases_supported: bool
    #: the lease has a holder but its time ran out (judged by the store's clock, as
    #: ``statekeeper health`` judges stale leases): nobody holds it any more
    lease_expired: bool = False


@dataclass
class KeysView:
    #: (key, first seq, last seq, event type) from the events' bodies
    keys: list[tuple[str, int, int, str]] = field(default_factory=list)
    #: (step id, seq, result text)
    steps: list[tuple[str, int, str]] = field(default_factory=list)
    #: how many keys the backend's index holds (None: the engine cannot list them)
    indexed: int | None = None
    #: the index holds keyed MACs, not the keys (a keyring is set)
    hashed: bool = False
    read: int = 0
    truncated: bool = False
    #: the retention base when retention compacted the history before it (the keys
    #: and steps are those of the events after it), else None
    compacted: int | None = None


async def agent_view(
    store: StateStore,
    agent_id: str,
    machine: AgentStateMachine[Any, Any] | None,
    budget: int,
) -> tuple[AgentView, TimelinePage]:
    """The agent page: its state first (on a governed store, the one read check:
    :class:`AccessDenied`, audited once), then its lease and history concurrently, the
    history read once for both the diagram's counts and the newest page of the
    timeline. The lease and the stored sizes are read from the backend directly, only
    after that check."""
    backend = store.backend

    async def lease() -> LeaseInfo | None:
        return await backend.get_lease(agent_id) if backend.supports_leases else None

    async def events() -> tuple[int, list[Event]]:
        """(the retention base, 0 for none; up to ``budget`` events kept after it)"""
        try:
            return 0, [ev async for ev in store.history(agent_id, to_seq=budget)]
        except HistoryCompacted as exc:  # the budget counts from the base (was: from seq
            base = exc.base_seq  # 1, so a base past it read and counted nothing)
            return base, await kept_history(store, agent_id, base, base + budget)

    snap = await store.load(agent_id)
    got_lease, (base, read) = await asyncio.gather(lease(), events())
    graph = from_machine(machine)
    graph.truncated = snap.seq > base + budget
    observe_transitions(graph, read)
    graph.compacted = base  # (kept events start past 1)
    if read and read[-1].seq >= snap.seq:  # the whole history: the timeline is in it
        newest = [ev for ev in read if ev.seq <= snap.seq][-TIMELINE_PAGE:]
        # (kept events start after 1: retention compacted the history before them)
        line = await _page(store, agent_id, newest, snap.seq, read[0].seq - 1)
    else:
        line = await timeline(store, agent_id)
    view = AgentView(
        snapshot=snap,
        state_entered_at=snap.state_entered_at,
        graph=graph,
        lease=got_lease,
        leases_supported=backend.supports_leases,
        lease_expired=got_lease is not None
        and got_lease.holder is not None
        and got_lease.expires_at <= store.clock(),
    )
    return view, line


async def _page(
    store: StateStore, agent_id: str, events: list[Event], head: int, base: int = 0
) -> TimelinePage:
    """Timeline rows for ``events`` (ascending), newest first, with stored sizes;
    ``base``: retention compacted the history up to this seq (nothing older to load)."""
    if not events:
        return TimelinePage([], head, None, None, compacted=base or None)
    lo, hi = events[0].seq - 1, events[-1].seq
    raw = await store.backend.read(agent_id, lo, hi)
    sizes = {r.seq: len(r.payload) for r in raw}
    rows = [EventRow(ev, sizes.get(ev.seq, 0), changes(ev.ops)) for ev in reversed(events)]
    return TimelinePage(
        rows=rows,
        head=head,
        older_than=lo + 1 if lo > base else None,
        newer_than=hi if hi < head else None,
        compacted=base if base and lo <= base else None,
    )


async def timeline(
    store: StateStore,
    agent_id: str,
    *,
    before: int | None = None,
    after: int | None = None,
    to: int | None = None,
) -> TimelinePage:
    """A page of events, newest first: the newest ones, those before seq ``before``,
    or — the live view — the newest page of those after seq ``after`` up to seq ``to``
    (the head the live stream announced; default: the head now).

    The live view's page is exactly ``after+1 .. to``: not the events written since
    the announcement (the next one brings them: shown twice otherwise), and when they
    are more than a page, the newest page and :attr:`TimelinePage.gap` for the rest
    (never silently the oldest page only, the newer ones skipped for good)."""
    head = await store.head(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    if after is not None:
        hi = head if to is None else min(head, to)
        if before is not None:
            hi = min(hi, before - 1)
        lo = max(after, hi - TIMELINE_PAGE)
    else:
        hi = head if before is None else min(head, before - 1)
        lo = max(0, hi - TIMELINE_PAGE)
    events = await kept_history(store, agent_id, lo, hi) if hi > lo else []
    # kept events starting later than asked (or none of a range asked): retention
    # compacted the history before them (no "Older events" that load nothing)
    base = events[0].seq - 1 if events and events[0].seq > lo + 1 else 0
    if not events and hi > lo and after is None:
        base = hi
    page = await _page(store, agent_id, events, head, base)
    if after is not None and lo > after:
        page.gap = (after, lo)
    return page


async def event_detail(store: StateStore, agent_id: str, seq: int) -> tuple[Event, list[Change]]:
    """One event with its patch shown against the state before it."""
    head = await store.head(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    if not 1 <= seq <= head:
        raise InvalidArgument("seq", f"seq {seq} is outside 1..{head} for this agent")
    event = None
    # (a seq before the retention base raises HistoryCompacted: the app answers 410)
    async for ev in store.history(agent_id, after_seq=seq - 1, to_seq=seq):
        event = ev
    if event is None:  # not stored, though below the head: say so (not a bare 500)
        raise IntegrityError(agent_id, seq, f"event {seq} is missing below head {head}")
    before: dict[str, Any] = {}
    if seq > 1:
        before = (await store.load(agent_id, at_seq=seq - 1)).data
    return event, changes(event.ops, before)


def document(snap: Snapshot) -> dict[str, Any]:
    return {"state": snap.fsm_state, "data": snap.data}


async def diff_view(
    store: StateStore, agent_id: str, a: int, b: int
) -> tuple[Snapshot, Snapshot, list[Change]]:
    head = await store.head(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    for name, seq in (("a", a), ("b", b)):
        if not 1 <= seq <= head:
            raise InvalidArgument(name, f"seq {seq} is outside 1..{head} for this agent")
    old = await store.load(agent_id, at_seq=a)
    new = await store.load(agent_id, at_seq=b)
    return old, new, compare(document(old), document(new))


async def keys_view(store: StateStore, agent_id: str, budget: int) -> KeysView:
    """Idempotency keys and durable steps, from the events' bodies (the plain keys),
    plus the size of the backend's key index when the engine can list it."""
    view = KeysView()
    seen: dict[str, int] = {}
    try:
        [ev async for ev in store.history(agent_id, to_seq=1)]  # (its first event)
    except HistoryCompacted as exc:  # retention compacted the start: the kept events
        view.compacted = exc.base_seq
    async for ev in store.history(agent_id, after_seq=view.compacted or 0):
        view.read += 1
        key = ev.idempotency_key
        if key is not None:
            if key in seen:
                k, first, _, kind = view.keys[seen[key]]
                view.keys[seen[key]] = (k, first, ev.seq, kind)
            else:
                seen[key] = len(view.keys)
                view.keys.append((key, ev.seq, ev.seq, ev.type))
        if "step" in ev.info and (
            ev.type == "step" or (key is not None and key.startswith(STEP_KEY_PREFIX))
        ):
            view.steps.append((str(ev.info["step"]), ev.seq, pretty(ev.info.get("result"), 300)))
        if view.read >= budget:
            view.truncated = True
            break
    backend = store.backend
    if backend.supports(Capability.KEY_EXPORT):
        view.indexed = len(await backend.idempotency_keys(agent_id))
        view.hashed = store.codec.keyring is not None
    return view


_KIND_HELP = {
    "event": "An event's bytes do not authenticate, do not continue the hash chain, or its "
    "patch does not apply: the history itself is damaged. Loads past it fail; restore the "
    "agent from a backup.",
    "snapshot": "A snapshot (a cache of the fold) is damaged or differs from the replay of "
    "the events. Loads fall back to an older snapshot or a replay, so no data is lost; "
    "`statekeeper repair` rebuilds it from the verified events.",
    "head": "The stream's head (its last seq and authenticated tag) does not match the "
    "events: records were removed or rolled back outside statekeeper.",
    "idempotency": "An idempotency record does not match its event: a retried step could "
    "be applied twice. The events themselves verify.",
    "agent": "The agent could not be checked at all (see the reason).",
    "rollback": "The store's witness saw this stream further along than it is now: the "
    "store was restored from an older backup or rolled back.",
}


_KEY_FILE = "--key-file or STATEKEEPER_KEY_FILE"

#: a problem that is the key given, not damage (:func:`~statekeeper.store.verification.key_trouble`)
_KEY_HELP = {
    "missing": (
        "key missing",
        "This record is encrypted with a key this inspector was not given: the key is "
        f"missing, the record is not damaged. Start the inspector with the store's key "
        f"({_KEY_FILE}); neither a repair nor a backup is needed.",
    ),
    "wrong": (
        "wrong key",
        "The key this inspector was given under this record's key id is other key "
        "material: the key is wrong, the record is not damaged. Start the inspector with "
        f"the key file the store was written with ({_KEY_FILE}); neither a repair nor a "
        "backup is needed.",
    ),
}


def problem_help(kind: str) -> str:
    return _KIND_HELP.get(kind, "")


@dataclass(frozen=True)
class ProblemRow:
    """One problem of the Verify panel: its label, what it says, what to do."""

    problem: Problem
    label: str
    reason: str
    help: str
    #: ``"missing"`` / ``"wrong"``: the key given cannot open the record (not damage)
    key: str | None


def problem_rows(report: VerifyReport, safe: Callable[[str], str]) -> list[ProblemRow]:
    """The Verify panel's rows of ``report`` (``safe`` masks the store URL's secrets):
    a record the key given cannot open says the key is missing or wrong, not that the
    history is damaged (as the agent page says)."""
    rows = []
    for p in report.problems:
        key = key_trouble(p)
        label, help_text = _KEY_HELP[key] if key is not None else (p.kind, problem_help(p.kind))
        rows.append(ProblemRow(p, label, safe(p.reason), help_text, key))
    return rows


#: how the state download is written (indented, keys of any type)
JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def state_document(agent_id: str, snap: Snapshot) -> dict[str, Any]:
    """What ``/agent/state.json`` downloads: the whole state at ``snap.seq``, its typed
    values (Decimal, bytes, datetime, set, UUID…) in the tagged form the store keeps and
    ``statekeeper export`` writes (``{"$t": "decimal", "v": "1.10"}``; orjson's own
    spelling of a datetime or UUID is a plain string, read back as one)."""
    return {
        "agent_id": agent_id,
        "seq": snap.seq,
        "fsm_state": snap.fsm_state,
        "schema_version": snap.schema_version,
        "data": shown(snap.data),  # typed values tagged, as an export writes them
    }


async def verify_view(store: StateStore, agent_id: str) -> VerifyReport:
    return await store.verify([agent_id])


def optional_module(name: str) -> bool:
    """True when ``statekeeper.<name>`` is installed (the page says so when it is not)."""
    try:
        return importlib.util.find_spec(f"statekeeper.{name}") is not None
    except (ImportError, ValueError):
        return False


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def ago(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"
