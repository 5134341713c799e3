"""``store.subscribe(...)``: the change feed as an async iterator of verified events.

One loop serves both phases. The subscription reads the backend's feed after its
cursor, a page at a time (:meth:`~statekeeper.backends.base.Backend.read_feed`); when a
page comes back empty it is *live* and waits for a wake-up
(:meth:`~statekeeper.backends.base.Backend.wait_feed`: a PostgreSQL notification, a
Redis stream entry, a SQLite poll) and reads again. Catch-up and live are the same
query from the same cursor, so nothing can fall between them or be read twice; the
backend never returns a position beyond its safe frontier, so a position that commits
late (PostgreSQL) is not skipped.

Back-pressure: the subscription pulls. It reads the next page only when the consumer
has taken every event of the last one, so a slow consumer holds at most one page in
memory and the writers never wait for it.

Filters (``namespace``, ``agent_prefix``, ``event_types``) are applied to the stored
agent id and kind before anything is decrypted; filtered-out positions still move the
cursor (:attr:`Subscription.position`), so resuming from it never re-reads them. On a
store opened as a principal, the policy is one more such filter (:class:`FeedAccess`):
the events of agents the principal may not read are passed over the same way.
statekeeper's own streams (ids starting ``"\x01"``: the audit log) are never delivered,
as they are never listed: the audit log is read with ``statekeeper audit``.

Every event is verified (checksum or AEAD tag) as on a load; a damaged one raises
:class:`~statekeeper.errors.IntegrityError`. The per-agent hash chain is checked by
loads and ``verify``, not here: the feed interleaves agents. The events of a
crypto-shredded agent (``forget``: its data key destroyed) are skipped like a deleted
agent's: they can never be read again, and the feed must not stall on them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Protocol

from .. import namespaces
from ..arguments import check_seq
from ..backends.base import Capability
from ..errors import AgentForgotten, FeedPositionCompacted, InvalidArgument
from ..records import FeedEvent, FeedRecord
from .body import to_event

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["FeedAccess", "Subscription", "namespace_prefix"]

#: the longest a live subscription waits before it reads the feed again, wake-up or not
LIVE_WAIT = 1.0


def namespace_prefix(namespace: str) -> str:
    """The agent-id prefix a feed filter on ``namespace`` selects: its agents and those
    of the namespaces below it (:mod:`statekeeper.namespaces`; the root ``""`` is
    refused here: a subscription without ``namespace=`` is the whole feed)."""
    if not isinstance(namespace, str) or not namespace or "" in namespace.split("/"):
        raise InvalidArgument(
            "namespace",
            f"a namespace is '/'-separated non-empty parts (no leading, trailing or"
            f" double '/'), not {namespace!r:.60}",
        )
    return namespaces.namespace_prefix(namespace)


class FeedAccess(Protocol):
    """Who may see what on a subscription of a store opened as a principal
    (:meth:`statekeeper.store.governed.GovernedStateStore.subscribe`)."""

    async def admit(self) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` (audited) when the
        subscription may not start; called once, before the first read."""
        ...

    def readable(self, agent_id: str) -> bool:
        """True when the subscriber may read ``agent_id``'s events (asked per event,
        so a policy changed while the subscription runs applies from then on)."""
        ...


class Subscription(AsyncIterator[FeedEvent]):
    """The events of the store in feed order, from after ``from_position``: catch-up from
    storage, then live. Iterate with ``async for``; :attr:`position` is the resume
    point (the last position delivered or filtered out).

    With ``stop_at_head`` the iteration ends once it has passed the feed's head as it
    was when the subscription started (a catch-up only: rebuilds, reports, tests).

    Raises :class:`~statekeeper.errors.FeedPositionCompacted` when ``from_position`` (or
    the cursor, after a concurrent trim) lies below the feed's floor, and
    :class:`~statekeeper.errors.CapabilityUnsupported` on an engine without a feed.
    """

    def __init__(
        self,
        store: StateStore,
        from_position: int = 0,
        *,
        namespace: str | None = None,
        agent_prefix: str | None = None,
        event_types: Iterable[str] | None = None,
        batch_size: int = 256,
        stop_at_head: bool = False,
        access: FeedAccess | None = None,
    ) -> None:
        check_seq(from_position, "from_position")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgument(
                "batch_size", f"batch_size must be an int >= 1, not {batch_size!r}"
            )
        prefixes: list[str] = []
        if namespace is not None:
            prefixes.append(namespace_prefix(namespace))
        if agent_prefix is not None:
            if not isinstance(agent_prefix, str):
                raise InvalidArgument(
                    "agent_prefix", f"agent_prefix must be a str, not {agent_prefix!r}"
                )
            prefixes.append(agent_prefix)
        kinds: frozenset[str] | None = None
        if event_types is not None:
            if isinstance(event_types, str):
                raise InvalidArgument(
                    "event_types", "event_types is a collection of types, not one str"
                )
            kinds = frozenset(event_types)
            if not all(isinstance(k, str) for k in kinds):
                raise InvalidArgument("event_types", "event_types must be strings")
        store.backend.require(Capability.FEED, "store.subscribe()")
        self._store = store
        self._access = access
        self._prefixes = tuple(prefixes)
        self._kinds = kinds
        self._batch = batch_size
        self._stop_at_head = stop_at_head
        self._stop: int | None = None
        self._started = False
        self._page: deque[FeedRecord] = deque()
        #: the last position delivered or passed over: subscribe again from here
        self.position = from_position

    def __aiter__(self) -> Subscription:
        return self

    def _wanted(self, record: FeedRecord) -> bool:
        agent_id = record.agent_id
        if agent_id[:1] == "\x01":
            return False  # statekeeper's own streams (the audit log): hidden, as in listings
        if any(not agent_id.startswith(p) for p in self._prefixes):
            return False
        if self._kinds is not None and record.event.kind not in self._kinds:
            return False
        return self._access is None or self._access.readable(agent_id)

    async def _check_floor(self) -> tuple[int, int]:
        floor, head = await self._store.backend.feed_bounds()
        if self.position < floor:
            raise FeedPositionCompacted(self.position, floor)
        return floor, head

    async def _fill(self) -> bool:
        """Read the next page into the buffer; False when there is none yet."""
        backend = self._store.backend
        page = await backend.read_feed(self.position, self._batch)
        if page and page[0].position > self.position + 1:
            await self._check_floor()  # a gap: normal, unless it is a trimmed range
        if self._stop is not None:
            page = [r for r in page if r.position <= self._stop]
        self._page.extend(page)
        return bool(page)

    def _take(self) -> FeedEvent | None:
        """The next wanted event of the buffered page (verified), or None."""
        store = self._store
        while self._page:
            record = self._page.popleft()
            if not self._wanted(record):
                self.position = record.position
                continue
            try:
                body, _ = store._open_event(record.agent_id, record.event)
            except AgentForgotten:
                # crypto-shredded: unreadable for good, in every copy; a gap, as if
                # deleted (the feed must not stall on it)
                self.position = record.position
                continue
            event = to_event(record.agent_id, record.event, body)
            self.position = record.position
            return FeedEvent(record.position, event)
        return None

    async def _start(self) -> None:
        store = self._store
        store._check_open()
        if self._access is not None:
            await self._access.admit()
        await store._ready()
        _, head = await self._check_floor()
        self._stop = head if self._stop_at_head else None
        self._started = True

    async def __anext__(self) -> FeedEvent:
        if not self._started:
            await self._start()
        while True:
            event = self._take()
            if event is not None:
                return event
            if self._stop is not None and self.position >= self._stop:
                raise StopAsyncIteration
            self._store._check_open()
            if await self._fill():
                continue
            if self._stop is not None:
                # nothing more up to the head taken at the start (its records were
                # deleted, or filtered): done
                raise StopAsyncIteration
            await self._check_floor()
            await self._store.backend.wait_feed(self.position, LIVE_WAIT)

    async def next_batch(self, limit: int = 256) -> list[FeedEvent]:
        """Up to ``limit`` events: waits (live) until at least one is there, then adds
        what is stored already without waiting again. ``[]`` once a ``stop_at_head``
        subscription is done. What projections apply in one transaction."""
        try:
            out = [await self.__anext__()]
        except StopAsyncIteration:
            return []
        while len(out) < limit:
            event = self._take()
            if event is None:
                if self._stop is not None and self.position >= self._stop:
                    break
                if not await self._fill():
                    break
                continue
            out.append(event)
        return out
