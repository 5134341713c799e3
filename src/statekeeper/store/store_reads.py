"""The store's reads: an agent's state (latest, or at a seq or a time), its head,
its history, and the listing of agents; the read path itself is
:class:`~.reads.ReadPath`.

Methods of :class:`~.store.StateStore`, written here as functions and bound in its class
body (as :func:`.copies.public_copy` is in :class:`~.reads.ReadPath`; a subclass
overrides them as any method). They take ``self: StateStore``: they hand the store to
the tools typed for it. A function here never shares its name with a global it calls
(``tests/store/test_store_parts.py``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from ..arguments import AUDIT_STREAM, HOLDS_STREAM, check_agent_id, check_seq, check_timestamp
from ..backends.base import Health
from ..errors import AgentNotFound, ConfigurationError
from ..records import AgentInfo, Event, Snapshot
from . import feed_deletes
from .heads import AgentHead, read_head, read_heads
from .history import read_history
from .reads import PAGE
from .state import AgentRecord
from .writes import SEEN

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "count_agents",
    "get",
    "get_many",
    "head",
    "head_state",
    "head_states",
    "health",
    "history",
    "iter_agents",
    "list_agents",
    "load",
    "unlisted_agents",
]

_perf = time.perf_counter


async def get(self: StateStore, agent_id: str) -> Snapshot | None:
    """The agent's latest state, or None if it has no stream."""
    return await self._get(agent_id, False)


async def _get_shared(self: StateStore, agent_id: str) -> Snapshot | None:
    """:meth:`get` for a caller that never changes the data it is handed (the
    LangGraph saver: its documents are changed copy-on-write): the store's own
    folded document, not a copy (see ``Reads.public``)."""
    return await self._get(agent_id, True)


async def _get(self: StateStore, agent_id: str, shared: bool) -> Snapshot | None:
    # The observation bracket (begin / failed / done) is written out here and in
    # load, create, save, append: folded into one context-manager class
    # (``with _Bracket(obs, "save", agent_id) as b``) the save cost, per save on
    # memory:// (callgrind, benchmarks/bench_observability_saves.py at N=900 minus
    # N=300, both sides in the same run, 2026-12-02): 139,831 -> 143,194
    # instructions without an observer (+2.4 %), 144,678 -> 146,558 instrumented
    # (+1.3 %): the object and its __enter__/__exit__ calls on every operation.
    obs = self.observer
    mark = None if obs is None else _perf() if obs.untraced else obs.begin("load", agent_id)
    try:
        await self._ready(agent_id)
        record = await self._reads.current(agent_id)
        result = self._reads.public(record, shared=shared) if record is not None else None
        if record is not None and (seen := SEEN.get()) is not None:  # a DurableAgent's
            seen.adopted = record.link
            seen.adopted_tag = record.tag if record.tag_known else None
            seen.adopted_replay = (record.replay_bytes, record.snapshot_bytes)
    except BaseException as exc:
        if obs is not None:
            obs.failed("load", mark, exc)
        raise
    if obs is not None:
        obs.done("load", mark, result)
    return result


async def get_many(self: StateStore, agent_ids: Sequence[str]) -> list[Snapshot | None]:
    """:meth:`get` of many agents, in order (None for an agent without a stream).

    The agents not already cached are read together, in one consistent read on
    engines that answer it natively (SQLite), one by one elsewhere: what a bulk
    pass over the store (a schema migration) reads a page of agents with."""
    self._check_open()
    ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
    await self._ready()
    records = await self._reads.current_many(ids)
    return [self._reads.public(r) if r is not None else None for r in records]


async def load(
    self: StateStore, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
) -> Snapshot:
    """The agent's state: latest, or as it was at ``at_seq`` / at time ``at_time``.

    Raises :class:`AgentNotFound` when the agent has no stream (or had none yet at
    ``at_time``), and :class:`IntegrityError` when a record fails verification.
    """
    obs = self.observer
    mark = None if obs is None else _perf() if obs.untraced else obs.begin("load", agent_id)
    try:
        self._check_open()
        check_agent_id(agent_id)
        if at_seq is not None:
            check_seq(at_seq, "at_seq")
        if at_time is not None:
            check_timestamp(at_time, "at_time")
        gate = self._gate  # (_ready() inlined: no coroutine per load)
        if not gate.ok and not gate.readable:
            await gate.check(self, write=False)
        if at_seq is None and at_time is None:
            reads = self._reads
            seen = SEEN.get()  # a DurableAgent's load: it is told the state's link
            record = reads.current_now(agent_id, False, seen is None)  # (no coroutine)
            if type(record) is Snapshot:  # (made straight from the snapshot: kept by nobody)
                result = record
            else:
                if record is not None and type(record) is not AgentRecord:
                    assert not isinstance(record, (AgentRecord, Snapshot))
                    record = await record
                if record is None:
                    raise AgentNotFound(agent_id)
                result = reads.public(record)
                if seen is not None:
                    seen.adopted = record.link
                    seen.adopted_tag = record.tag if record.tag_known else None
                    seen.adopted_replay = (record.replay_bytes, record.snapshot_bytes)
        else:
            if at_seq is not None and at_time is not None:
                raise ConfigurationError("give at_seq or at_time, not both")
            await self._flush_agent(agent_id)
            result = self._reads.public(await self._reads.at(agent_id, at_seq, at_time))
    except BaseException as exc:
        if obs is not None:
            obs.failed("load", mark, exc)
        raise
    if obs is not None:
        obs.done("load", mark, result)
    return result


async def head(self: StateStore, agent_id: str) -> int:
    """The agent's last seq (0 if it has no stream), counting buffered writes."""
    await self._ready(agent_id)
    pinned = self._reads.pinned.get(agent_id)
    return pinned.seq if pinned is not None else await self.backend.head(agent_id)


async def head_state(self: StateStore, agent_id: str) -> AgentHead | None:
    """The agent's head seq and FSM state without folding its data (None when it has
    no stream): cheap enough to list many agents. See :mod:`.heads`."""
    self._check_open()
    return await read_head(self, agent_id)


async def head_states(self: StateStore, agent_ids: Sequence[str]) -> list[AgentHead | None]:
    """:meth:`head_state` of many agents, in order, reading their head events
    together (one statement on SQLite and PostgreSQL): for listing pages."""
    self._check_open()
    ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
    return await read_heads(self, ids)


async def history(
    self: StateStore, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
) -> AsyncIterator[Event]:
    """Every event of the agent in order, verified, read page by page."""
    self._check_open()
    check_agent_id(agent_id)
    check_seq(after_seq, "after_seq")
    check_seq(to_seq, "to_seq", optional=True)
    await self._ready()
    await self._flush_agent(agent_id)
    async for event in read_history(self._reads, agent_id, after_seq, to_seq):
        yield event


async def list_agents(
    self: StateStore, after: str | None = None, limit: int = 100
) -> list[AgentInfo]:
    """One page of agents ordered by id (use ``after`` = last id for the next page)."""
    self._check_open()
    if after is not None:
        check_agent_id(after, "after")
    check_seq(limit, "limit", minimum=1)
    await self.flush()
    page = await self.backend.list_agents(after=after, limit=limit)
    if any(info.agent_id[:1] == "\x01" for info in page):  # statekeeper's own streams
        return await self._agents_only(page, limit)
    return page


async def _agents_only(self: StateStore, page: list[AgentInfo], limit: int) -> list[AgentInfo]:
    """``page`` without statekeeper's own streams (the audit log), refilled."""
    out = [info for info in page if info.agent_id[:1] != "\x01"]
    while len(page) == limit and len(out) < limit:
        page = await self.backend.list_agents(after=page[-1].agent_id, limit=limit)
        out.extend(info for info in page if info.agent_id[:1] != "\x01")
    return out[:limit]


async def unlisted_agents(self: StateStore) -> list[str]:
    """The agents the engine stores and its listings do not show (Redis: taken off
    its agent index by hand; ``verify`` names them), in id order: read by id like
    any other, and copied by an export with the listed ones."""
    self._check_open()
    return [a for a in await self.backend.unlisted_agents() if a[:1] != "\x01"]


async def iter_agents(self: StateStore) -> AsyncIterator[AgentInfo]:
    """Every agent, in id order, paging under the hood."""
    after: str | None = None
    while True:
        page = await self.list_agents(after=after, limit=PAGE)
        for info in page:
            yield info
        if len(page) < PAGE:
            return
        after = page[-1].agent_id


async def count_agents(self: StateStore) -> int:
    """How many agents have a stream."""
    self._check_open()
    await self.flush()
    count = await self.backend.count_agents()
    own_streams = (AUDIT_STREAM, HOLDS_STREAM, *feed_deletes.streams(self.backend))
    for own in own_streams:  # the store's own streams: not agents
        if count and await self.backend.head(own):
            count -= 1
    if count and getattr(self.backend, "tombstones_by_namespace", False):  # one a namespace
        count -= await self.backend.count_prefix(feed_deletes.PREFIX_IN)
    if count and feed_deletes.has_feed(self.backend):
        # a delete's (or, on every engine, a forget's) intent a crash left
        from .feed_intents import PENDING

        count -= await self.backend.count_prefix(PENDING)
    return count


async def health(self: StateStore) -> Health:
    """The backend's health report."""
    return await self.backend.health()
