"""Tiered ("hybrid") backend: hot (memory/Redis) → durable (SQLite/PostgreSQL) → cold (S3).

The durable tier is the truth; the others are copies kept coherent by the rules below.

Writes
    An append goes to the durable tier first — compare-and-append, idempotency keys
    and conflicts are decided there, and nothing is acknowledged before it commits —
    then, best effort, to the hot tier with the same expected seq. When the hot copy
    disagrees (its append conflicts) it is dropped, to be refilled on the next read;
    so is one not proven the agent's incarnation by the commit (:mod:`.tiered_proof`).
    :meth:`TieredBackend.append_batch`: one durable commit, one pipelined hot trip.

Reads — the durable tier is the authority
    ``head`` and ``head_tag`` are always answered by the durable tier (one indexed
    read). ``read`` and ``latest_snapshot`` are answered by the hot tier only when
    its copy of the agent has exactly the durable tier's head *and* head tag, checked
    on every call (one durable and one hot point read), and a ``read`` must also come
    back complete up to that head; otherwise the durable tier answers, and the
    agent's stream (events and snapshots) is then copied into the hot tier —
    *refilled lazily on read*. ``seq_at``, idempotency-key lookups and listings always
    use the durable tier. So a hot copy that is stale — written before an outage
    and never updated, restored from an old dump, left behind by a process that
    died, or shared by processes that never saw each other's failures — is never
    served, whatever any process remembers: no process reads an agent below a seq
    the durable tier already acknowledged.

A hot tier that fails
    Every hot call is bounded by ``hot_timeout``; an error or timeout marks the hot
    tier down for ``hot_retry_after`` seconds and the call is answered by the durable
    tier instead — no read nor append fails because of the hot tier, and no write is
    lost because none was acknowledged by it alone. A prune, a rewrite and the delete
    of a stream with no head tag drop the hot copy first (one left would match the
    changed stream's head and tag): refused, nothing changed, while they cannot
    (:meth:`~.tiered_writes.TieredWrites._drop_hot_first`; its error says why, of an
    agent with no durable stream too). Agents written while it
    was down (or whose hot update failed) are remembered, and their hot copies are
    deleted before the hot tier is used for them again (a clean-up only: correctness
    rests on the check against the durable head above, not on this process's memory).

Cold tier
    With ``cold`` and ``idle_after`` set, :meth:`TieredBackend.demote_idle` (run every
    ``demote_interval`` seconds when that is set) moves agents idle for longer than
    ``idle_after`` to the cold tier: their stream, snapshots and idempotency keys are
    copied (both tiers must offer ``Capability.KEY_EXPORT``; a tier without it is
    refused when the backend is built), a small marker is written to the durable
    tier, and the agent is removed from the durable and hot tiers. Any later use of
    the agent (a read, an append, a key lookup) finds the marker and first copies the
    agent back — *rehydrated transparently*. ``list_agents`` and ``count_agents``
    include demoted agents.

Multi-process rules
    Several processes may share the durable and a Redis hot tier: every tiered writer
    updates the shared hot copy, so it keeps serving hits; a copy that another
    process (or a process-local ``memory://`` hot tier) missed fails the head check
    and is dropped and refilled. Demotion may run in every process: its marker is its
    claim (a conditional insert with a token of its own, before the cold tier is
    touched), so of concurrent demotions of one agent exactly one goes on and the
    others write nothing; a write during a demotion is kept (its delete of the stream
    is conditional on the head record it copied) and the demotion ends its own claim.
    The delete commits with the marker's second record (the demotion done) only while
    the claim is its own (SQLite, PostgreSQL, Redis but a cluster, memory: one
    commit), so a claim whose demotion was killed is taken over once it is old and its
    process provably gone. A rehydration there claims the agent too (a third record of
    the marker, before it copies back): its end is its owner's alone, and a rehydration
    killed before its end is taken over by the next demotion by the same rule.

Read-only (``readonly=True``)
    Every write (appends, snapshots, deletes, rewrites, leases, demotion,
    ``initialize``) raises :class:`~statekeeper.errors.ReadOnlyStore` before any tier
    is touched. Reads are answered by the durable tier, or by the cold tier for an
    agent whose durable marker says it was demoted; nothing is ever filled into the
    hot tier, rehydrated or demoted, and no background demoter runs. The hot tier is
    not used at all (see :meth:`TieredBackend.hot_available`).

The parts
    :class:`TieredBackend` is assembled from one part per job, each a module:
    :mod:`.tiered_base` (what the parts share), :mod:`.tiered_hot` (the hot tier),
    :mod:`.tiered_writes` (every write), :mod:`.tiered_proof` (unchecked appends'
    hot copies), :mod:`.tiered_claims` (markers and claims: reading, taking over,
    ending, conditional clean-ups) with :mod:`.tiered_owner` (a claim's owner and
    whether it is provably gone), :mod:`.tiered_demote` (demotion),
    :mod:`.tiered_rehydrate` (rehydration and first uses),
    :mod:`.tiered_in_place` (reads where the agent is), :mod:`.tiered_agents` (listings,
    counts, calls over every agent), :mod:`.tiered_copy` (copying a stream between
    tiers), :mod:`.tiered_cold` (is a cold copy the demoted stream); here: the
    constructor and the reads, leases and feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..arguments import MAX_ID_BYTES
from ..errors import ConfigurationError
from ..records import AppendResult, FeedRecord, LeaseInfo, RawEvent, RawSnapshot
from .base import Backend, Capability, Health
from .keyed_locks import KeyedLock
from .tiered_agents import TieredAgents
from .tiered_claims import COLD_MARKER
from .tiered_demote import TieredDemote
from .tiered_in_place import TieredInPlace
from .tiered_writes import TieredWrites

__all__ = ["COLD_MARKER", "TieredBackend"]


class TieredBackend(TieredWrites, TieredDemote, TieredInPlace, TieredAgents):
    """Hot → durable → cold tiers behind the one backend contract.

    Args:
        durable: the tier of record (SQLite, PostgreSQL…).
        hot: an optional fast copy (memory, Redis). A Redis hot tier should be built
            with ``retry_timeout=0`` (``from_url`` does that) so that a dead server
            fails fast.
        cold: an optional archive (S3) for agents idle longer than ``idle_after``.
        idle_after: seconds without use (in this process) and without a write (from
            any process) after which :meth:`demote_idle` moves an agent to ``cold``.
        demote_interval: run :meth:`demote_idle` in the background this often.
        hot_timeout: seconds a hot-tier call may take before it counts as failed.
        hot_retry_after: seconds the hot tier is left alone after a failure.
        fill_limit: streams longer than this are not copied into the hot tier.
        clock: wall clock used for idleness (compared with event timestamps).
        readonly: read only (see the module documentation); the tiers should be
            opened read-only too (``from_url`` does that).
    """

    name = "tiered"

    def __init__(
        self,
        durable: Backend,
        hot: Backend | None = None,
        cold: Backend | None = None,
        *,
        idle_after: float | None = None,
        demote_interval: float | None = None,
        hot_timeout: float = 0.5,
        hot_retry_after: float = 1.0,
        fill_limit: int = 10_000,
        clock: Callable[[], float] = time.time,
        readonly: bool = False,
    ) -> None:
        if idle_after is not None and cold is None:
            raise ConfigurationError("idle_after needs a cold tier to demote agents to")
        if demote_interval is not None and idle_after is None:
            raise ConfigurationError("demote_interval needs idle_after")
        if hot_timeout <= 0 or hot_retry_after < 0:
            raise ConfigurationError("hot_timeout must be > 0 and hot_retry_after >= 0")
        for name, tier in (("durable", durable), ("cold", cold)):
            if tier is not None and tier.expires_agents:
                # an agent the tier of record expires is lost without a trace
                raise ConfigurationError(
                    f"the {name} tier deletes agents after a TTL; a tier of record must "
                    "keep them (set the TTL on the hot tier only)"
                )
            keep = getattr(tier, "keep_agents", None)  # (Redis: a TTL its store records)
            if keep is not None:
                keep()
        if cold is not None:
            # demotion copies the agent's idempotency keys there and back: without
            # them a retried step would be stored twice after a round trip
            why = "a cold tier needs it to keep idempotency keys across demotion"
            durable.require(Capability.KEY_EXPORT, "durable tier: " + why)
            cold.require(Capability.KEY_EXPORT, "cold tier: " + why)
        self.durable = durable
        # the durable tier's compare-and-set decides every append (check_tag included);
        # the hot copy given the same request conflicts only when it is stale (dropped)
        self.compares_head_tag = durable.compares_head_tag
        #: leases are the durable tier's (it checks fences atomically with appends)
        self.supports_leases = durable.supports_leases
        own = {
            Capability.LEASES,
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.KEY_RENAME,
        }
        caps = {c for c in own if durable.supports(c)}
        if durable.supports(Capability.MIGRATIONS):
            caps.add(Capability.MIGRATIONS)
        if all(t.supports(Capability.DROP_ALL) for t in (hot, durable, cold) if t is not None):
            caps.add(Capability.DROP_ALL)
        if cold is None and durable.supports(Capability.FEED):
            # the feed is the tier of record's. Not with a cold tier: demotion deletes an
            # agent's events from the durable tier and rehydration appends them again,
            # under new positions (a follower would see them twice), and the tier's
            # marker records would be events of the feed
            caps.add(Capability.FEED)
            committed = getattr(durable, "feed_committed_head", None)
            if committed is not None:
                #: the feed's newest committed position, where its head is a safe
                #: frontier that lags it (a PostgreSQL durable tier: store/feed.py)
                self.feed_committed_head = committed
            handed_out = getattr(durable, "feed_handed_out_head", None)
            if handed_out is not None:
                #: the last position its feed handed out (store/feed.py)
                self.feed_handed_out_head = handed_out
        if durable.supports(Capability.LEASE_LIST):
            caps.add(Capability.LEASE_LIST)
        if durable.supports(Capability.KEY_EXPIRY) and (
            cold is None or cold.supports(Capability.KEY_EXPIRY)
        ):
            # an agent's records are in the tier holding it: the durable or the cold one
            caps.add(Capability.KEY_EXPIRY)
        if cold is None or cold.supports(Capability.BASE_IMPORT):
            # a compacted stream is demoted as it is stored: the cold tier must hold one
            caps |= {c for c in (Capability.PRUNE, Capability.BASE_IMPORT) if durable.supports(c)}
        #: the durable tier's leases, key export, rewrite, key renaming, migrations, prune and
        #: compacted streams (these two when a cold tier can hold one too); ``drop_all``
        #: when every tier has it; never TTL (an expiring tier of record loses data)
        self.capabilities = frozenset(caps)
        if hot is not None and hasattr(hot, "evictable"):
            # a hot copy may be evicted by its server: the durable tier answers instead
            setattr(hot, "evictable", True)  # noqa: B010
        self.hot = hot
        self.cold = cold
        limits = [t.max_id_bytes for t in (hot, durable, cold) if t is not None]
        if cold is not None and durable.max_id_bytes < MAX_ID_BYTES:
            # (an engine of shorter keys holds no longer internal id: a cold marker's)
            limits.append(durable.max_id_bytes - len(COLD_MARKER.encode()))
        #: the longest agent id every tier holds (a demoted agent's marker too)
        self.max_id_bytes = min(limits)
        self.idle_after = idle_after
        self.demote_interval = demote_interval
        self.hot_timeout = hot_timeout
        self.hot_retry_after = hot_retry_after
        self.fill_limit = fill_limit
        self.clock = clock
        self.readonly = readonly
        self._hot_down_until = 0.0
        #: the hot tier answered once (its configuration accepted: :meth:`_check_hot`)
        self._hot_ready = False
        self._dirty: set[str] = set()
        self._locks = KeyedLock()  # one per agent: its durable write and hot copy together
        self._last_used: dict[str, float] = {}
        # agents this process found without a cold marker (or brought back whole), each
        # with the highest durable head it saw of it: a durable stream of one not in
        # here, or below that head (another process demoted the agent since, and a third
        # is bringing it back), may be the part of a rehydration (under way, or killed)
        self._settled: dict[str, int] = {}
        self._maintenance: asyncio.Task[None] | None = None
        self._closed = False
        self.stats: dict[str, int] = {
            "hot_hits": 0,
            "hot_misses": 0,
            "hot_failures": 0,
            "fills": 0,
            "demotions": 0,
            "rehydrations": 0,
        }

    @property
    def audit_links(self) -> bool:  # type: ignore[override]
        """The tier of record's, as it is now: the audit log is kept there, and
        PostgreSQL learns whether row-level security is on only as it opens. A copy
        taken here (the class default, False) made a tenant role's audit appends
        chain by reading entries it may not see."""
        return self.durable.audit_links

    @property
    def reads_audit_log(self) -> bool:  # type: ignore[override]
        """The tier of record's, as it is now (see :attr:`audit_links`): a tenant
        role's ``audit verify`` through a tiered store is refused, not a false alarm
        of deleted entries."""
        return self.durable.reads_audit_log

    @property
    def tombstones_by_namespace(self) -> bool:  # type: ignore[override]
        """The tier of record's, as it is now (see :attr:`audit_links`): the deletes'
        feed tombstones go to its namespaces' streams under row-level security. A copy
        (the class default, False) made every delete there write none: read models
        kept the deleted agents."""
        return self.durable.tombstones_by_namespace

    @property
    def intents_by_namespace(self) -> bool:  # type: ignore[override]
        """The tier of record's, as it is now (see :attr:`tombstones_by_namespace`)."""
        return self.durable.intents_by_namespace

    @classmethod
    def from_url(
        cls, url: str, *, connect_timeout: float | None = None, readonly: bool = False
    ) -> TieredBackend:
        """``tiered://?hot=<url>&durable=<url>&cold=<url>&idle_after=<s>&…``.

        Each tier is a URL for :func:`~statekeeper.backends.url.open_backend`,
        percent-encoded (see :func:`~statekeeper.backends.url.tiered_url`). Other
        options: ``demote_interval``, ``hot_timeout``, ``hot_retry_after`` (seconds)
        and ``fill_limit``. A ``redis://`` hot tier gets ``retry_timeout=0`` unless the
        URL sets it. ``connect_timeout`` is passed to every tier. ``readonly=True``
        opens the durable and cold tiers read-only and does not open the hot tier
        (a read-only tiered backend never uses it).
        """
        from .redact import mask_url
        from .url import open_backend

        options = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        durable_url = options.pop("durable", None)
        if not durable_url:
            raise ConfigurationError(f"a tiered URL needs a durable tier: {mask_url(url)!r}")
        hot_url = options.pop("hot", None) or None
        cold_url = options.pop("cold", None) or None
        redis_hot = hot_url and hot_url.split("://", 1)[0] in ("redis", "rediss", "unix")
        if hot_url and redis_hot and "retry_timeout=" not in hot_url:
            hot_url += ("&" if "?" in hot_url else "?") + "retry_timeout=0"
        if hot_url and redis_hot and "feed=" not in hot_url:
            hot_url += ("&" if "?" in hot_url else "?") + "feed=0"  # the durable tier's feed
        kwargs: dict[str, Any] = {}
        for key in ("idle_after", "demote_interval", "hot_timeout", "hot_retry_after"):
            if key in options:
                try:
                    kwargs[key] = float(options.pop(key))
                except ValueError as exc:
                    raise ConfigurationError(
                        f"{key} must be a number in {mask_url(url)!r}"
                    ) from exc
        if "fill_limit" in options:
            try:
                kwargs["fill_limit"] = int(options.pop("fill_limit"))
            except ValueError as exc:
                raise ConfigurationError(
                    f"fill_limit must be an integer in {mask_url(url)!r}"
                ) from exc
        if options:
            raise ConfigurationError(
                f"unknown tiered options {sorted(options)} in {mask_url(url)!r}"
            )
        durable = open_backend(durable_url, connect_timeout=connect_timeout, readonly=readonly)
        # read-only, the hot tier is never used: it is not even opened
        hot = (
            open_backend(hot_url, connect_timeout=connect_timeout)
            if hot_url and not readonly
            else None
        )
        cold = (
            open_backend(cold_url, connect_timeout=connect_timeout, readonly=readonly)
            if cold_url
            else None
        )
        return cls(durable, hot, cold, readonly=readonly, **kwargs)

    def __repr__(self) -> str:
        tiers = [f"durable={self.durable!r}"]
        tiers += [f"{n}={t!r}" for n, t in (("hot", self.hot), ("cold", self.cold)) if t]
        return f"TieredBackend({', '.join(tiers)})"

    async def ensure_store(self) -> None:
        """The durable tier (the tier of record) must be a statekeeper store."""
        self._check_open()
        await self.durable.ensure_store()

    async def initialize(self) -> None:
        """Initialize the durable tier, and the cold tier if any."""
        self._check_can_write()
        await self.durable.initialize()
        if self.cold is not None:
            await self.cold.initialize()

    async def _authority(self, agent_id: str, *, touch: bool = True) -> Backend:
        """The tier that answers what only the tier of record knows about ``agent_id``:
        read-only, the tier holding it; else the durable tier, with a demoted agent
        brought back from the cold tier first (``touch``: the agent counts as used)."""
        self._check_open()
        if self._in_place():
            return await self._reader(agent_id)
        if touch:
            self._touch(agent_id)
        if self.cold is not None:
            await self._durable_head(agent_id)
        return self.durable

    async def head(self, agent_id: str) -> int:
        """The durable tier's head (the authority; the hot tier is never asked)."""
        self._check_open()
        if self._in_place():
            return await (await self._reader(agent_id)).head(agent_id)
        self._touch(agent_id)
        return await self._durable_head(agent_id)

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        """The durable tier's head and tag (the authority; the hot tier is never asked)."""
        return await (await self._authority(agent_id)).head_tag(agent_id)

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        self._check_open()
        if self._in_place():
            return await (await self._reader(agent_id)).read(agent_id, after_seq, to_seq, limit)
        self._touch(agent_id)
        await self._settle(agent_id)
        checked = await self._hot_checked(
            agent_id, lambda h: h.read(agent_id, after_seq, to_seq, limit)
        )
        if checked is not None and _complete(checked[1], checked[0], after_seq, to_seq, limit):
            self._hit()
            return checked[1]
        self.stats["hot_misses"] += 1
        events = await self.durable.read(agent_id, after_seq, to_seq, limit)
        if (
            self.cold is not None
            and _short(events, self._settled.get(agent_id, 0), to_seq, limit)
            and await self._durable_head(agent_id) > 0
        ):  # demoted, or below the head seen here: another process's rehydration part
            events = await self.durable.read(agent_id, after_seq, to_seq, limit)
        if events:
            await self._fill(agent_id)
        return events

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        """Answered by the durable tier (its answer cannot be checked for completeness
        the way a read can; it is a rare, time-travel call)."""
        return await (await self._authority(agent_id)).seq_at(agent_id, timestamp)

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        self._check_open()
        if self._in_place():
            tier = await self._reader(agent_id)
            return await tier.latest_snapshot(agent_id, at_or_below)
        self._touch(agent_id)
        await self._settle(agent_id)
        # A checked hot copy holds every snapshot of the agent: its "none" is exact too.
        # (Should the hot tier lose data during the call, an older snapshot or none
        # only makes the caller replay more events, read and checked as above.)
        checked = await self._hot_checked(
            agent_id, lambda h: h.latest_snapshot(agent_id, at_or_below)
        )
        if checked is not None:
            self._hit()
            return checked[1]
        self.stats["hot_misses"] += 1
        if self.cold is not None:
            await self._durable_head(agent_id)
        return await self.durable.latest_snapshot(agent_id, at_or_below)

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        return await (await self._authority(agent_id)).lookup_key(agent_id, key)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """The durable tier's keys of the agent (``CapabilityUnsupported`` when the
        durable tier cannot list them)."""
        self._check_open()
        self.require(Capability.KEY_EXPORT)
        return await (await self._authority(agent_id, touch=False)).idempotency_keys(agent_id)

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        self._check_can_write()
        return await self.durable.acquire_lease(agent_id, holder, ttl)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        self._check_can_write()
        return await self.durable.renew_lease(agent_id, holder, token, ttl)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        self._check_can_write()
        return await self.durable.release_lease(agent_id, holder, token)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        self._check_can_write()
        return await self.durable.release_lease_again(agent_id, holder, token)

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        self._check_open()
        return await self.durable.get_lease(agent_id)

    async def next_lease_token(self, agent_id: str, current: LeaseInfo | None) -> int:
        self._check_open()
        return await self.durable.next_lease_token(agent_id, current)

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        await self.durable.carry_lease_tokens(tokens)

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        self._check_open()
        return await self.durable.list_leases(after, limit)

    async def read_marker(self, name: str) -> bool | None:
        """The durable tier's store-level marker (the store's truth)."""
        self._check_open()
        return await self.durable.read_marker(name)

    async def set_marker(self, name: str) -> None:
        """Set on the durable tier."""
        self._check_open()
        await self.durable.set_marker(name)

    async def schema_version(self) -> int:
        """The durable tier's schema version."""
        self._check_open()
        self.require(Capability.MIGRATIONS)
        return await self.durable.schema_version()

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        self._check_open()
        self.require(Capability.FEED, "a tiered backend with a cold tier")
        return await self.durable.read_feed(after, limit)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        self._check_open()
        self.require(Capability.FEED, "a tiered backend with a cold tier")
        return await self.durable.read_feed_page(after, limit)

    async def feed_bounds(self) -> tuple[int, int]:
        self._check_open()
        self.require(Capability.FEED, "a tiered backend with a cold tier")
        return await self.durable.feed_bounds()

    async def trim_feed(self, through: int) -> int:
        self._check_can_write()
        self.require(Capability.FEED, "a tiered backend with a cold tier")
        return await self.durable.trim_feed(through)

    async def feed_id(self) -> str | None:
        self._check_open()
        return await self.durable.feed_id()

    async def renew_feed_id(self) -> str | None:
        self._check_can_write()
        return await self.durable.renew_feed_id()

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        self._check_open()
        if Capability.FEED not in self.capabilities:
            return None
        return await self.durable.feed_position(agent_id, seq)

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self._check_open()
        if Capability.FEED not in self.capabilities:
            return {}
        return await self.durable.feed_positions(wanted)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self._check_open()
        self.require(Capability.FEED, "a tiered backend with a cold tier")
        await self.durable.wait_feed(after, max_wait)

    async def health(self) -> Health:
        if self._closed:
            return Health(ok=False, backend=self.name, detail={"error": "closed"})
        durable = await self.durable.health()
        detail: dict[str, Any] = {"durable": durable.detail | {"ok": durable.ok}}
        if self.hot is not None:
            hot = await self.hot.health()
            detail["hot"] = hot.detail | {"ok": hot.ok, "in_use": self.hot_available()}
        if self.cold is not None:
            cold = await self.cold.health()
            detail["cold"] = cold.detail | {"ok": cold.ok}
        detail["stats"] = dict(self.stats)
        return Health(ok=durable.ok, backend=self.name, detail=detail)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
        for tier in (self.hot, self.durable, self.cold):
            if tier is not None:
                await tier.close()


def _short(events: list[RawEvent], seen: int, to_seq: int | None, limit: int | None) -> bool:
    """Does a read's answer end below ``seen`` (the head this process saw) though
    neither ``to_seq`` nor ``limit`` cut it there — or is it empty?"""
    if not events:
        return True
    end = events[-1].seq
    return end < (seen if to_seq is None else min(seen, to_seq)) and (
        limit is None or len(events) < limit
    )


def _complete(
    events: list[RawEvent], head: int, after_seq: int, to_seq: int | None, limit: int | None
) -> bool:
    """Is ``events`` a full answer to ``read(after_seq, to_seq, limit)`` of a stream
    whose head is at least ``head``? (A hot copy that lost data between the head
    check and the read comes back short.)"""
    end = head if to_seq is None else min(to_seq, head)
    want = max(0, end - max(after_seq, 0))
    if limit is not None:
        want = min(want, max(limit, 0))
    if len(events) < want:
        return False
    return not events or events[0].seq == max(after_seq, 0) + 1
