"""The agents list: prefix search, namespace/state/last-write filters, sort by id or by
last write, and keyset pagination (both directions by id, forwards by last write).

Every page is one or a few index range reads (:meth:`StateStore.list_agents` forward,
:meth:`Backend.list_agents_before` backward), never an ``OFFSET`` or a count, so page
N costs what page 1 costs on a store of any size. A prefix (and a namespace, which is
the prefix ``namespace/``) narrows the range itself. The last-write filter reads the
time the index row already carries. The state filter is the one that needs each
agent's head decoded (:meth:`StateStore.head_state`): a page stops after
:data:`SCAN_BUDGET` candidates and says so, and *Next* continues the search from
where it stopped — a slow filter never makes a slow page.

An agent whose stored data is lost (:class:`~statekeeper.errors.AgentLost`: on Redis, its
keys evicted or deleted behind the store's back) is listed as lost, as ``statekeeper
agents`` lists it, and the page goes on past it; the state and last-write filters
pass it over (nothing of it is known).

Sorted by last write (``sort=recent`` / ``sort=idle``), a page is a range of the
engine's last-write index (:meth:`Backend.list_agents_by_write`) after the cursor
``(last write, id)``; a prefix or namespace is then a filter under the same budget.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .._durations import DURATION_EXAMPLES, seconds_in
from ..arguments import INTERNAL_PREFIX, check_agent_id
from ..errors import (
    AgentForgotten,
    AgentLost,
    CapabilityUnsupported,
    DecryptionError,
    InvalidArgument,
)
from ..namespaces import check_namespace
from ..records import AgentInfo
from ..store.governed import governance_of
from ..store.listing import agents_past_lost

if TYPE_CHECKING:
    from ..store import StateStore
    from ..store.heads import AgentHead

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "SCAN_BUDGET",
    "AgentQuery",
    "AgentRow",
    "AgentsPage",
    "list_page",
    "parse_count",
    "parse_duration",
]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: the most candidates one page looks at when a filter rejects rows
SCAN_BUDGET = 2000
#: the most heads one page decodes for the state filter
HEAD_BUDGET = 250
#: a page stops scanning after this many seconds (and offers to continue)
TIME_BUDGET = 0.05
_TOP = "\U0010ffff"

#: by id (ascending, descending), or by last write (newest first, longest idle first)
Order = Literal["asc", "desc", "recent", "idle"]
BY_WRITE = ("recent", "idle")


def parse_count(text: str, argument: str, default: int, most: int, of: str = "") -> int:
    """The whole number ``text`` of the query parameter ``argument``, within
    ``1..most`` (``default`` when empty); ``of`` names what it counts in the errors."""
    if not text:
        return default
    unit = f" {of}" if of else ""
    try:
        count = int(text)
    except ValueError:
        raise InvalidArgument(
            argument, f"{argument} must be a whole number{' of' if of else ''}{unit}"
        ) from None
    if not 1 <= count <= most:
        raise InvalidArgument(argument, f"{argument} must be within 1..{most:,}{unit}")
    return count


def parse_duration(text: str, argument: str) -> float:
    """Seconds in ``"90s"``, ``"15m"``, ``"1h30m"``, ``"30d"``, ``"2w"`` (or a bare number
    of seconds); :class:`InvalidArgument` naming ``argument`` otherwise."""
    seconds = seconds_in(text)
    if seconds is None:
        raise InvalidArgument(
            argument, f"{argument} must be a positive duration like {DURATION_EXAMPLES}"
        )
    return seconds


@dataclass(frozen=True)
class AgentQuery:
    """What the list shows: the parameters of ``/agents``, checked."""

    prefix: str = ""
    namespace: str = ""
    state: str = ""
    #: written within this many seconds
    active: float | None = None
    #: not written for this many seconds
    idle: float | None = None
    order: Order = "asc"
    #: keyset cursor: the page starts after this id (in ``order``)
    after: str | None = None
    #: keyset cursor: the page ends before this id (the previous page)
    before: str | None = None
    #: with a last-write sort: the last write of the ``after`` agent (the cursor's
    #: other half)
    at: float | None = None
    limit: int = DEFAULT_LIMIT
    #: the raw texts of ``active``/``idle`` (for links)
    active_text: str = ""
    idle_text: str = ""

    @classmethod
    def parse(cls, params: dict[str, str]) -> AgentQuery:
        """From query parameters; bad values raise :class:`InvalidArgument`."""

        def text(name: str) -> str:
            return params.get(name, "").strip()

        order = text("sort") or "asc"
        if order not in ("asc", "desc", *BY_WRITE):
            raise InvalidArgument("sort", "sort must be 'asc', 'desc', 'recent' or 'idle'")
        limit = parse_count(text("limit"), "limit", DEFAULT_LIMIT, MAX_LIMIT)
        # a namespace (statekeeper.namespaces): its agents and those of namespaces below
        namespace = check_namespace(text("ns"), "ns")
        after = params.get("after") or None
        before = params.get("before") or None
        for name, value in (("after", after), ("before", before)):
            if value is not None:
                check_agent_id(value, name)
        if after is not None and before is not None:
            raise InvalidArgument("after", "give after or before, not both")
        at_text = text("at")
        at: float | None = None
        if order in BY_WRITE:
            if before is not None:
                raise InvalidArgument("before", "the last-write sorts page forwards only")
            if after is not None:  # the keyset cursor is (last write, id)
                try:
                    at = float(at_text)
                except ValueError:
                    raise InvalidArgument(
                        "at", "at must be the last-write time of the 'after' agent"
                    ) from None
                if at != at or at in (float("inf"), float("-inf")):
                    raise InvalidArgument("at", "at must be a finite time")
        active_text, idle_text = text("active"), text("idle")
        return cls(
            prefix=params.get("q", ""),
            namespace=namespace,
            state=text("state"),
            active=parse_duration(active_text, "active") if active_text else None,
            idle=parse_duration(idle_text, "idle") if idle_text else None,
            order=order,  # type: ignore[arg-type]
            after=after,
            before=before,
            at=at,
            limit=limit,
            active_text=active_text,
            idle_text=idle_text,
        )

    @property
    def full_prefix(self) -> str:
        """The id prefix every listed agent has (namespace, then the search text)."""
        return (self.namespace + "/" if self.namespace else "") + self.prefix

    def params(self, **changes: str | None) -> dict[str, str]:
        """The query as URL parameters (cursors dropped unless given in ``changes``)."""
        out = {
            "q": self.prefix,
            "ns": self.namespace,
            "state": self.state,
            "active": self.active_text,
            "idle": self.idle_text,
            "sort": self.order if self.order != "asc" else "",
            "limit": str(self.limit) if self.limit != DEFAULT_LIMIT else "",
        }
        out.update({k: v or "" for k, v in changes.items()})
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class AgentRow:
    """One listed agent."""

    info: AgentInfo
    fsm_state: str | None
    state_entered_at: float
    #: the agent's stored data is lost: what was found (nothing else of it is known:
    #: ``info`` holds its id, zeros besides)
    lost: str | None = None
    #: the agent was crypto-shredded (``statekeeper forget``): its data key is
    #: destroyed, so no state of it can be read (listed, as ``statekeeper agents``
    #: lists it, instead of failing the whole page)
    forgotten: bool = False


@dataclass
class AgentsPage:
    """One page of the list, with the cursors of its neighbours."""

    rows: list[AgentRow] = field(default_factory=list)
    #: cursor for the next page (None: this is the last)
    next_after: str | None = None
    #: with a last-write sort: the time half of the next page's cursor
    next_at: str | None = None
    #: cursor for the previous page (None: this is the first, or unknown)
    prev_before: str | None = None
    #: the page stopped at its scan budget before filling up
    partial: bool = False
    scanned: int = 0
    #: False when the engine cannot read its index backwards (no descending sort)
    backwards: bool = True


def start_after(prefix: str) -> str | None:
    """An id just below every id starting with ``prefix`` (None: from the start)."""
    if not prefix:
        return None
    last = ord(prefix[-1])
    if last <= 1:
        return prefix[:-1] or None
    return prefix[:-1] + chr(last - 1) + _TOP


Cursor = str | tuple[float, str] | None


async def _fetch(
    store: StateStore, order: Order, cursor: Cursor, n: int
) -> list[AgentInfo | AgentLost]:
    """``n`` index rows strictly beyond ``cursor`` in ``order`` — of the agents the
    store's principal may read, when it is opened as one; an agent whose data is lost
    comes as its :class:`AgentLost`.

    Ascending, :meth:`StateStore.list_agents` (a governed store filters it itself),
    going on past lost agents (:func:`~statekeeper.store.listing.agents_past_lost`);
    the other orders read the backend's indexes directly
    (:meth:`Backend.list_agents_before`, :meth:`Backend.list_agents_by_write`), so they
    apply the same policy here, reading on until ``n`` readable rows or the end: an id
    the principal may not read is never returned, nor used as a cursor in a link."""
    if order == "asc":
        assert not isinstance(cursor, tuple)
        found: list[AgentInfo | AgentLost] = []
        listing = agents_past_lost(store.list_agents, cursor, n)
        async with contextlib.aclosing(listing):
            async for item in listing:
                found.append(item)
                if len(found) == n:
                    break
        return found
    await store.flush()
    gov = governance_of(store)
    if gov is not None and gov.policy is not None and not gov.policy.knows(gov.principal or ""):
        await gov.require(None, "read", "list")  # an unknown principal: refused, audited
    out: list[AgentInfo | AgentLost] = []
    while len(out) < n:
        if order in BY_WRITE:
            assert cursor is None or isinstance(cursor, tuple)
            batch = await store.backend.list_agents_by_write(
                cursor, n, newest_first=order == "recent"
            )
            cursor = (batch[-1].updated_at, batch[-1].agent_id) if batch else cursor
        else:
            assert not isinstance(cursor, tuple)
            batch = await store.backend.list_agents_before(cursor, n)
            cursor = batch[-1].agent_id if batch else cursor
        out.extend(info for info in batch if gov is None or gov.can_read(info.agent_id))
        if len(batch) < n:
            break
    return out[:n]


async def _heads(
    store: StateStore, infos: list[AgentInfo], forgotten: set[str]
) -> list[AgentHead | None]:
    """The heads of ``infos``, in one read; an agent whose head this store cannot
    decrypt (an encrypted store opened without its key), whose data was lost since
    it was listed, or that was forgotten (its data key destroyed: its id is added to
    ``forgotten``) is listed without its state rather than failing the whole page."""
    if not infos:
        return []
    ids = [info.agent_id for info in infos]
    try:
        return await store.head_states(ids)
    except (DecryptionError, AgentLost, AgentForgotten):
        heads: list[AgentHead | None] = []
        for agent_id in ids:
            try:
                heads.extend(await store.head_states([agent_id]))
            except AgentForgotten:
                forgotten.add(agent_id)
                heads.append(None)
            except (DecryptionError, AgentLost):
                heads.append(None)
        return heads


async def list_page(
    store: StateStore, query: AgentQuery, *, now: float | None = None
) -> AgentsPage:
    """The page ``query`` asks for."""
    backwards = store.backend.lists_backwards
    by_write = query.order in BY_WRITE
    if query.order == "desc" and not backwards:
        raise CapabilityUnsupported(store.backend.name, "listing agents backwards")
    if by_write and not store.backend.lists_by_write:
        raise CapabilityUnsupported(store.backend.name, "listing agents by last write")
    prefix = query.full_prefix
    if prefix:
        check_agent_id(prefix, "q")
    reverse = query.before is not None  # walking back to the previous page
    order: Order = query.order
    cursor: Cursor
    if by_write:
        # the last-write index is not ordered by id: a prefix is a filter, not a range
        cursor = (
            (query.at, query.after) if query.after is not None and query.at is not None else None
        )
    else:
        if reverse:
            if not backwards:
                raise CapabilityUnsupported(store.backend.name, "listing agents backwards")
            order = "desc" if query.order == "asc" else "asc"
            cursor = query.before
        else:
            cursor = query.after
        # never start outside the prefix's range (a cursor from another search)
        low, high = start_after(prefix), (prefix + _TOP if prefix else None)
        if order == "asc" and (cursor is None or (low is not None and cursor < low)):
            cursor = low
        if order == "desc" and (cursor is None or (high is not None and cursor > high)):
            cursor = high
    clock = time.time() if now is None else now
    started = time.perf_counter()
    page = AgentsPage(backwards=backwards)
    heads = 0
    done = False
    last_scanned: str | None = None
    last_at: float | None = None
    filtering = bool(query.state or query.active or query.idle or (by_write and prefix))
    candidates: list[AgentInfo] = []
    lost: list[AgentLost] = []  # of this batch's candidates, those whose data is lost
    while not done and len(page.rows) <= query.limit:
        want = query.limit + 1 - len(page.rows)
        batch = await _fetch(store, order, cursor, max(want, 64) if filtering else want)
        if not batch:
            done = True
            break
        for item in batch:
            agent_id = item.agent_id
            if isinstance(item, AgentLost):  # (ascending only: no last-write cursor)
                cursor = agent_id
                if agent_id.startswith(prefix) and not filtering:
                    lost.append(item)
                    candidates.append(AgentInfo(agent_id, 0, 0.0, 0.0))
                    if len(page.rows) + len(candidates) > query.limit:
                        break
                continue
            info = item
            if by_write:
                cursor = (info.updated_at, agent_id)
                # sorted by last write: past the active/idle window, nothing further
                # can match
                if (order == "recent" and query.active is not None and
                        info.updated_at < clock - query.active) or (
                        order == "idle" and query.idle is not None and
                        info.updated_at > clock - query.idle):  # fmt: skip
                    done = True
                    break
            else:
                cursor = agent_id
            if not agent_id.startswith(prefix):
                if by_write:  # a filter here: counts as looked at, within the budget
                    if page.scanned >= SCAN_BUDGET or time.perf_counter() - started > TIME_BUDGET:
                        page.partial = True
                        done = True
                        break
                    page.scanned += 1
                    last_scanned, last_at = agent_id, info.updated_at
                    continue
                if (order == "asc") == (agent_id > prefix):
                    done = True  # past the prefix's range
                    break
                continue  # the ids just before the range (see start_after)
            if agent_id.startswith(INTERNAL_PREFIX):
                continue
            if filtering and (
                page.scanned >= SCAN_BUDGET
                or heads >= HEAD_BUDGET + query.limit
                or time.perf_counter() - started > TIME_BUDGET
            ):
                page.partial = True  # stop here; Next continues after last_scanned
                done = True
                break
            page.scanned += 1
            last_scanned, last_at = agent_id, info.updated_at
            if query.active is not None and info.updated_at < clock - query.active:
                continue
            if query.idle is not None and info.updated_at > clock - query.idle:
                continue
            candidates.append(info)
            if not query.state and len(page.rows) + len(candidates) > query.limit:
                break
        else:
            if len(batch) < want:
                done = True
        # the heads of this batch's candidates, in one read (a lost agent has none)
        gone = {item.agent_id: item.reason for item in lost}
        shredded: set[str] = set()
        found = iter(
            await _heads(store, [c for c in candidates if c.agent_id not in gone], shredded)
        )
        heads += len(candidates)
        for info in candidates:
            if info.agent_id in gone:
                page.rows.append(AgentRow(info, None, 0.0, lost=gone[info.agent_id]))
                if len(page.rows) > query.limit:
                    break
                continue
            head = next(found)
            fsm = head.fsm_state if head is not None else None
            if query.state and (fsm or "") != query.state:
                continue
            entered = head.state_entered_at if head is not None else 0.0
            page.rows.append(AgentRow(info, fsm, entered, forgotten=info.agent_id in shredded))
            if len(page.rows) > query.limit:
                break
        candidates.clear()
        lost.clear()
        if len(page.rows) > query.limit:
            break
    more = len(page.rows) > query.limit
    del page.rows[query.limit :]
    if reverse:
        page.rows.reverse()
        # walking back: there is always a next page (the one we came from)
        page.next_after = page.rows[-1].info.agent_id if page.rows else query.before
        if more or page.partial:
            page.prev_before = page.rows[0].info.agent_id if page.rows else last_scanned
        return page
    if by_write:  # forwards only; the cursor is (last write, id)
        if more:
            last = page.rows[-1].info
            page.next_after, page.next_at = last.agent_id, repr(last.updated_at)
        elif page.partial and last_scanned is not None:
            page.next_after, page.next_at = last_scanned, repr(last_at)
        return page
    if more:
        page.next_after = page.rows[-1].info.agent_id
    elif page.partial:
        page.next_after = last_scanned
    if query.after is not None and backwards:
        page.prev_before = page.rows[0].info.agent_id if page.rows else query.after
    return page
