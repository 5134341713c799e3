"""Tiered ("hybrid") backend: hot (memory/Redis) → durable (SQLite/PostgreSQL) → cold (S3).

The durable tier is the truth; the others are copies kept coherent by the rules below.

Writes
    An append goes to the durable tier first — compare-and-append, idempotency keys
    and conflicts are decided there, and nothing is acknowledged before it commits —
    then, best effort, to the hot tier with the same expected seq. When the hot copy
    disagrees (its append conflicts) it is dropped, to be refilled on the next read.
    :meth:`TieredBackend.append_batch` shares one durable commit and one pipelined hot
    round trip.

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
    tier instead — no operation fails because of the hot tier, and no write is lost
    because none was acknowledged by it alone. Agents written while it was down (or
    whose hot update failed) are remembered, and their hot copies are deleted before
    the hot tier is used for them again (a clean-up only: correctness rests on the
    check against the durable head above, not on this process's memory).

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
    process provably gone.

Read-only (``readonly=True``)
    Every write (appends, snapshots, deletes, rewrites, leases, demotion,
    ``initialize``) raises :class:`~statekeeper.errors.ReadOnlyStore` before any tier
    is touched. Reads are answered by the durable tier, or by the cold tier for an
    agent whose durable marker says it was demoted; nothing is ever filled into the
    hot tier, rehydrated or demoted, and no background demoter runs. The hot tier is
    not used at all (see :meth:`TieredBackend.hot_available`).

Over 600 lines because :class:`TieredBackend` implements the whole backend contract once,
over three tiers: every method routes between the hot, durable and cold tier under the
same per-agent lock, and the routing of one method is only correct next to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import orjson

from ..arguments import INTERNAL_PREFIX, MAX_ID_BYTES
from ..errors import (
    BackendError,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidAgentId,
    ReadOnlyStore,
    StatekeeperError,
    StoreClosed,
)
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    FeedRecord,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from .base import (
    Backend,
    Capability,
    Health,
    KeptKeys,
    check_expiry,
    validate_from_base,
    validate_request,
)
from .keyed_locks import KeyedLock
from .tiered_cold import (
    IN_FLIGHT,
    check_demoted_copy,
    claim_owner,
    head_is_demoted,
    marker_body,
    owner_gone,
    record_digest,
    same_record,
)

__all__ = ["COLD_MARKER", "TieredBackend"]

logger = logging.getLogger("statekeeper.backends.tiered")

T = TypeVar("T")

#: durable-tier agent ids of the markers of demoted agents (``COLD_MARKER + agent_id``)
COLD_MARKER = "\x01sk-cold/"
_MARKER_CEIL = "\x01sk-cold0"  # sorts right after every marker id
_PAGE = 1000
#: the most agents :attr:`TieredBackend._settled` remembers: a memo, one forgotten
#: costs one marker read at its next use (it is a first use again)
_SETTLED_MAX = 65536
#: seconds after which a demotion's claim whose owner is provably gone may be taken
#: over (:meth:`TieredBackend._take_over`): never sooner, whatever the owner
_CLAIM_STALE = 60.0
#: the tiered backends (by ``id``) whose reads this task makes in place (``in_place``)
_IN_PLACE: ContextVar[frozenset[int]] = ContextVar(
    "statekeeper_tiered_in_place", default=frozenset()
)


#: the demoted agents whose cold copy this task checked within ``in_place`` (by tiered
#: backend and marker): ``verify`` reads an agent in several calls, checked once
_CHECKED: ContextVar[set[tuple[int, str, bytes]] | None] = ContextVar(
    "statekeeper_tiered_cold_checked", default=None
)


class _Miss:
    """The hot tier did not answer (down, failed, or the agent is dirty)."""


_MISS = _Miss()


def _is_marker(agent_id: str) -> bool:
    return agent_id.startswith(COLD_MARKER)


def _is_internal(agent_id: str) -> bool:
    """A stream of the store's own (a cold marker, the audit log): it always stays in
    the durable tier, never demoted, so there is nothing to rehydrate."""
    return agent_id.startswith(INTERNAL_PREFIX)


class TieredBackend(Backend):
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

    # -- plumbing ------------------------------------------------------------------

    def __repr__(self) -> str:
        tiers = [f"durable={self.durable!r}"]
        tiers += [f"{n}={t!r}" for n, t in (("hot", self.hot), ("cold", self.cold)) if t]
        return f"TieredBackend({', '.join(tiers)})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("tiered backend is closed")
        if (
            self.demote_interval is not None
            and self._maintenance is None
            and self.cold is not None
            and not self.readonly
        ):
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())

    def _touch(self, agent_id: str) -> None:
        if self.idle_after is not None:
            self._last_used[agent_id] = self.clock()

    def hot_available(self) -> bool:
        """True when a hot tier is configured and not marked down (never when
        read-only)."""
        # Read-only, the hot tier is simply not used (rather than used under the
        # durable-head check): a miss or a stale copy would have to be refilled or
        # dropped, which are writes, and the process-local hot tier of a fresh
        # read-only process is empty anyway. The durable tier answers everything, as
        # it does whenever the hot tier is down.
        if self.readonly:
            return False
        return self.hot is not None and time.monotonic() >= self._hot_down_until

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore("the tiered store is open read-only")

    @contextlib.contextmanager
    def in_place(self) -> Iterator[None]:
        """Within it, this task's reads are those of a read-only store: a demoted agent
        is read from the cold tier (a part left by a killed rehydration too), nothing
        is rehydrated, filled into the hot tier or counted as used — ``verify`` and a
        backup read every agent, and used to bring every demoted one back. Writes are
        unchanged."""
        token = _IN_PLACE.set(_IN_PLACE.get() | {id(self)})
        checked = _CHECKED.set(set() if _CHECKED.get() is None else _CHECKED.get())
        try:
            yield
        finally:
            _CHECKED.reset(checked)
            _IN_PLACE.reset(token)

    def _in_place(self) -> bool:
        """Read where the agent is (read-only, or within :meth:`in_place`)."""
        return self.readonly or id(self) in _IN_PLACE.get()

    async def _reader(self, agent_id: str) -> Backend:
        """Read-only: the tier that holds the agent — the durable tier, or the cold
        tier when the agent has no durable stream but a durable marker (demoted)."""
        cold = self.cold
        if cold is None or _is_marker(agent_id):
            return self.durable
        head = await self.durable.head(agent_id)
        if 0 < self._settled.get(agent_id, head + 1) <= head:
            return self.durable
        entry = await self._marker_entry(agent_id)
        if entry is None:
            if head > 0:
                self._settle_at(agent_id, head)
            return self.durable
        # (a durable stream below the marker's head: what a rehydration copied so far)
        if head >= entry[0].head_seq or _is_claim(entry[1]):
            return self.durable
        # read as the agent only once it is the stream this store demoted: verify, a
        # backup and a read-only store (show, history) read an altered, missing or
        # swapped copy as the agent, "OK" (their reads now raise IntegrityError)
        checked = _CHECKED.get()
        key = (id(self), agent_id, orjson.dumps(entry[1]))
        if checked is None or key not in checked:
            try:
                await check_demoted_copy(cold, agent_id, entry[1], "it was not read")
            except IntegrityError:
                # brought back by another process meanwhile (its cold copy deleted)?
                # then the durable tier holds it whole: read there
                again = await self._marker_entry(agent_id)
                if again is None or again[1] != entry[1]:
                    return self.durable
                if await self.durable.head(agent_id) >= again[0].head_seq:
                    return self.durable
                raise
            if checked is not None:
                checked.add(key)
        return cold

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

    def _hot_failed(self, exc: BaseException) -> None:
        self.stats["hot_failures"] += 1
        if time.monotonic() >= self._hot_down_until:
            logger.warning(
                "hot tier failed (%s: %s); using the durable tier for %.1fs",
                type(exc).__name__,
                exc,
                self.hot_retry_after,
            )
        self._hot_down_until = time.monotonic() + self.hot_retry_after

    async def _hot_call(
        self,
        fn: Callable[[Backend], Awaitable[T]],
        agents: Sequence[str],
        *,
        write: bool,
        budget: float | None = None,
    ) -> T | _Miss:
        """Call the hot tier, or return ``_MISS`` when it is down, dirty or failing.

        ``ConflictError`` from the hot tier propagates (callers decide what it means).
        A failed or skipped *write* leaves the agents dirty: their hot copies are
        deleted before the hot tier serves them again.
        """
        hot = self.hot
        if hot is None:
            return _MISS
        if not self.hot_available():
            if write:
                self._dirty.update(agents)
            return _MISS
        for agent_id in agents:
            if agent_id in self._dirty and not await self._clean(agent_id):
                return _MISS
        try:
            async with asyncio.timeout(budget or self.hot_timeout):
                return await fn(hot)
        except ConflictError:
            raise
        except ConfigurationError as exc:  # (not a failure to wait out: see _check_hot)
            if write:
                self._dirty.update(agents)
            raise ConfigurationError(f"the tiered store's hot tier refused: {exc}") from exc
        except Exception as exc:
            if self._closed:
                raise StoreClosed("tiered backend closed during an operation") from exc
            if write:
                self._dirty.update(agents)
            self._hot_failed(exc)
            return _MISS

    async def _check_hot(self, agent_id: str) -> None:
        """Before the first write (every write that touches the hot tier: an append,
        a snapshot, a delete, a rewrite, a compaction, a key rename, a demotion): the
        hot tier is asked once (a read of the agent's head), so that a hot tier
        refusing its configuration (a ``ConfigurationError``: e.g. a Redis prefix
        holding a store of record) fails the operation before the durable tier is
        written, rather than after it (the change made, reported failed) or being
        passed over as a down hot tier for ever (a warning each ``hot_retry_after``).
        A hot tier down now is asked again at the next write."""
        if self._hot_ready or not self.hot_available():
            return
        answer = await self._hot_call(lambda h: h.head(agent_id), [], write=False)
        self._hot_ready = not isinstance(answer, _Miss)

    async def _clean(self, agent_id: str) -> bool:
        """Delete a possibly stale hot copy; True once the agent is clean."""
        assert self.hot is not None
        try:
            async with asyncio.timeout(self.hot_timeout):
                await self.hot.delete_agent(agent_id)
        except Exception as exc:
            self._hot_failed(exc)
            return False
        self._dirty.discard(agent_id)
        return True

    async def _drop_hot(self, agent_id: str) -> None:
        """The hot copy disagrees with the durable tier: delete it (or mark it dirty)."""
        result = await self._hot_call(lambda h: h.delete_agent(agent_id), [agent_id], write=True)
        if isinstance(result, _Miss):
            self._dirty.add(agent_id)

    async def _hot_checked(
        self, agent_id: str, fn: Callable[[Backend], Awaitable[T]]
    ) -> tuple[int, T] | None:
        """``(durable head, answer)`` when the hot tier may answer a read of the agent,
        else None (the caller asks the durable tier).

        The durable tier is the authority: a hot copy is trusted on no process's word
        (another process may have written while this one could not reach the hot
        tier, and died), only when its head and head tag equal the durable tier's,
        compared on every read. The durable head read, the hot head read and the hot
        read itself run concurrently: one round trip of latency, not three. The
        caller checks the answer against the durable head (a read must reach it), so
        an answer is never older than the durable head read during this call.
        """
        if self.hot is None or not self.hot_available():
            return None
        durable, hot, answer = await asyncio.gather(
            self.durable.head_tag(agent_id),
            self._hot_call(lambda h: h.head_tag(agent_id), [agent_id], write=False),
            self._hot_call(fn, [agent_id], write=False),
        )
        if durable[0] == 0 or isinstance(hot, _Miss) or isinstance(answer, _Miss):
            return None
        if hot == durable:
            return durable[0], answer
        if hot[0] > 0:  # stale, or moved/rewritten by someone else: refill it
            await self._drop_hot(agent_id)
        return None

    # -- writes --------------------------------------------------------------------

    def _too_long(self, agent_id: str) -> InvalidAgentId | None:
        """The refusal of an id longer than :attr:`max_id_bytes` (a tier's keys cannot
        hold it), or None: checked before anything is written to any tier."""
        limit = self.max_id_bytes
        if limit >= MAX_ID_BYTES or len(agent_id) * 4 <= limit:
            return None
        size = len(agent_id.encode("utf-8", "surrogatepass"))
        if size <= limit:
            return None
        shown = repr(agent_id if len(agent_id) <= 40 else agent_id[:40] + "…")
        return InvalidAgentId(
            f"agent_id {shown} is {size:,} bytes in UTF-8, over the limit of {limit:,} of"
            " this tiered store (the longest id each of its tiers, and a demoted agent's"
            " marker, holds)"
        )

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        refused = self._too_long(request.agent_id)
        if refused is not None:
            raise refused
        agent_id = request.agent_id
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            result = await self._durable_append(request)
            if not result.duplicate:
                await self._hot_apply([request])
        return result

    async def _durable_append(self, request: AppendRequest) -> AppendResult:
        agent_id = request.agent_id
        if request.expected_seq == 0 and self.cold is not None:
            await self._rehydrate(agent_id, locked=True)  # a demoted agent is not a new one
        elif self.cold is not None and agent_id not in self._settled:
            await self._first_use(agent_id, await self.durable.head(agent_id), locked=True)
        try:
            result = await self.durable.append(request)
        except ConflictError as exc:
            if (
                exc.current_seq == 0
                and self.cold is not None
                and await self._rehydrate(agent_id, locked=True)
            ) or await self._went_back(agent_id, exc.current_seq):
                result = await self.durable.append(request)
            else:
                await self._check_hot_head(agent_id, exc.current_seq)
                raise
        if agent_id in self._settled:
            self._settle_at(agent_id, result.last_seq)
        return result

    async def _went_back(self, agent_id: str, head: int) -> bool:
        """After a conflict at durable head ``head``: True when the agent was brought
        back from the cold tier now — its stream was below the head this process saw
        (another process demoted it since, and a third's rehydration is under way:
        the stream is that copy's part, which an append here was acknowledged on and
        deleted with the part, and read as the agent, stale)."""
        if self.cold is None or head >= self._settled.get(agent_id, 0):
            return False
        del self._settled[agent_id]
        return await self._first_use(agent_id, head, locked=True) != head

    async def _check_hot_head(self, agent_id: str, durable_head: int) -> None:
        """After a durable conflict: a hot copy at another head is stale — drop it."""
        hot_head = await self._hot_call(lambda h: h.head(agent_id), [agent_id], write=False)
        if not isinstance(hot_head, _Miss) and hot_head not in (0, durable_head):
            await self._drop_hot(agent_id)

    async def _hot_apply(self, requests: Sequence[AppendRequest]) -> None:
        """Mirror appends the durable tier accepted into the hot tier, best effort."""
        if self.hot is None or not requests:
            return
        agents = sorted({r.agent_id for r in requests})
        # the durable tier checked the fences; the copy carries none
        plain = [dataclasses.replace(r, fence=None) if r.fence is not None else r for r in requests]
        results = await self._hot_call(lambda h: h.append_batch(plain), agents, write=True)
        if isinstance(results, _Miss):
            return
        stale: set[str] = set()
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, ConflictError):
                if result.current_seq != 0:  # present but not at our base: stale
                    stale.add(request.agent_id)
            elif isinstance(result, BaseException) or result.duplicate:
                stale.add(request.agent_id)
        for agent_id in sorted(stale):
            await self._drop_hot(agent_id)

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        if not requests:
            return []
        refusals = {i: self._too_long(r.agent_id) for i, r in enumerate(requests)}
        if any(refusals.values()):  # (each refused on its own, the others made)
            rest = [r for i, r in enumerate(requests) if refusals[i] is None]
            made = iter(await self.append_batch(rest))
            return [refusals[i] or next(made) for i in range(len(requests))]
        agents = sorted({r.agent_id for r in requests})
        await self._check_hot(agents[0])
        for agent_id in agents:
            self._touch(agent_id)
        held: list[str] = []
        try:
            for agent_id in agents:  # sorted: two batches never wait on each other
                await self._locks.acquire(agent_id)
                held.append(agent_id)
            if self.cold is not None:  # a demoted agent is not a new one
                for agent_id in sorted({r.agent_id for r in requests if r.expected_seq == 0}):
                    await self._rehydrate(agent_id, locked=True)
                for agent_id in sorted({r.agent_id for r in requests} - self._settled.keys()):
                    await self._first_use(agent_id, await self.durable.head(agent_id), locked=True)
            results = await self.durable.append_batch(requests)
            if self.cold is not None:
                for i, (req, res) in enumerate(zip(requests, results, strict=True)):
                    if (
                        isinstance(res, ConflictError)
                        and res.current_seq == 0
                        and await self._rehydrate(req.agent_id, locked=True)
                    ):
                        try:
                            results[i] = await self.durable.append(req)
                        except Exception as exc:
                            results[i] = exc
            accepted = [
                req
                for req, res in zip(requests, results, strict=True)
                if isinstance(res, AppendResult) and not res.duplicate
            ]
            await self._hot_apply(accepted)
            for req, res in zip(requests, results, strict=True):
                if isinstance(res, ConflictError):
                    await self._check_hot_head(req.agent_id, res.current_seq)
        finally:
            for agent_id in held:
                self._locks.release(agent_id)
        return results

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_can_write()
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            try:
                await self.durable.save_snapshot(agent_id, snapshot)
            except ConflictError as exc:
                if not (exc.current_seq == 0 and await self._rehydrate(agent_id, locked=True)):
                    raise
                await self.durable.save_snapshot(agent_id, snapshot)
            try:
                await self._hot_call(
                    lambda h: h.save_snapshot(agent_id, snapshot), [agent_id], write=True
                )
            except ConflictError as exc:
                if exc.current_seq != 0:
                    await self._drop_hot(agent_id)

    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent from every tier: its cold copy first (a demoted agent's, or
        what a demotion cut short left of this stream), then its marker, then the durable
        stream — a failure on the way leaves the agent whole, and deleting again
        finishes. A cold copy that is not this store's (another store's sharing the cold
        tier: no marker here, or not the copy the marker says) is never touched."""
        self._check_can_write()
        self._last_used.pop(agent_id, None)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            existed = False
            if self.cold is not None:
                existed, ours = await self._own_cold(self.cold, agent_id)
                if ours:
                    await self.cold.delete_agent(agent_id)
                if existed:
                    await self.durable.delete_agent(COLD_MARKER + agent_id)
            existed = await self.durable.delete_agent(agent_id) or existed
            if self.hot is not None:
                await self._drop_hot(agent_id)
        return existed

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete ``agent_id`` only if its head is still ``head`` (and its head event's
        checksum ``checksum``, when given) (:meth:`Backend.delete_agent_at`):
        the durable tier's own conditional delete (one commit there), so an append that
        lands between the check and the delete — from this process or another sharing
        the durable tier — makes it a :class:`~statekeeper.errors.ConflictError` with
        nothing deleted. (The default compared the head, then deleted whatever was there:
        such an append was deleted with the agent, without an error.) A demoted agent is
        brought back first; the hot copy, and a cold copy of this store's own that a
        demotion cut short left (never another store's), go after the delete."""
        self._check_can_write()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            marker, ours = False, False
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
                marker, ours = await self._own_cold(self.cold, agent_id)
            if marker and self._fenced():
                # a demotion's claim beside the stream: ended first (its last step then
                # deletes nothing). Was: left until after the stream's delete — a load
                # in between found the claim's marker alone, took the agent for demoted
                # and brought the claim's whole cold copy back (the deleted agent served,
                # and kept)
                await self._end_claim(agent_id)
                marker = False
            await self.durable.delete_agent_at(agent_id, head, checksum)
            self._last_used.pop(agent_id, None)
            if self.cold is not None and ours:
                try:
                    await self.cold.delete_agent(agent_id)
                except StatekeeperError as exc:
                    raise BackendError(
                        f"agent {agent_id!r} was deleted from the durable tier, but deleting"
                        f" what a demotion cut short left of it in the cold tier"
                        f" {self.cold!r} failed ({type(exc).__name__}: {exc}); that copy is"
                        " left there (not the agent: nothing reads it), and a demotion of a"
                        " new agent of that id is refused while it is",
                        maybe_applied=True,
                    ) from exc
            if marker:
                await self.durable.delete_agent(COLD_MARKER + agent_id)
            if self.hot is not None:
                await self._drop_hot(agent_id)
        return True

    async def _end_claim(self, agent_id: str) -> None:
        """Delete ``agent_id``'s marker, conditional on the one read now (a claim since
        is another demotion's, left to it)."""
        entry = await self._marker_entry(agent_id)
        if entry is not None:
            body = entry[1]
            with contextlib.suppress(ConflictError):
                await self.durable.delete_agent_at(
                    COLD_MARKER + agent_id, body["_seq"], bytes.fromhex(body["_token"])
                )

    async def _own_cold(self, cold: Backend, agent_id: str) -> tuple[bool, bool]:
        """Has this store a marker of ``agent_id``, and is the cold tier's copy of it
        this store's (:meth:`_own_copy`)? A copy that is not is another store's sharing
        the cold tier, never to be deleted here."""
        entry = await self._marker_entry(agent_id)
        ours = await self._own_copy(cold, agent_id, entry)
        if entry is not None and not ours and await cold.head(agent_id):
            logger.warning(
                "the cold tier's copy of agent %r is not the one this store demoted"
                " (another store's sharing the cold tier?): left there",
                agent_id,
            )
        return entry is not None, ours

    async def _own_copy(
        self, cold: Backend, agent_id: str, entry: tuple[AgentInfo, dict[str, Any]] | None
    ) -> bool:
        """The one rule of what in the cold tier is this store's (a delete, ``drop_all``
        and a demotion about to replace a copy ask it): the copy this store's marker
        (``entry``) says it demoted, whole (a demoted agent, or a demotion's copy
        finished before its last step); or this store's durable stream up to the copy's
        head, the same record there (what a claim copied so far, or left when its
        demotion died; with no marker, what a demotion cut short or a rehydration
        killed before its end left). Anything else is another store's sharing the cold
        tier (or the copy of an agent of that id deleted since), never touched here.
        (:meth:`_drop_orphan` asks the same of what it wrote, the stream being gone;
        the claim token says whose the *marker* is, not the copy.)"""
        if entry is not None:
            with contextlib.suppress(IntegrityError):
                await check_demoted_copy(cold, agent_id, entry[1])
                return True
        held = await cold.head(agent_id)
        if not 0 < held <= await self.durable.head(agent_id):
            return False
        theirs = await cold.read(agent_id, held - 1, held)
        ours = await self.durable.read(agent_id, held - 1, held)
        return bool(theirs and ours and same_record(theirs[0], ours[0]))

    # -- reads ---------------------------------------------------------------------

    def _hit(self) -> None:
        self.stats["hot_hits"] += 1

    async def _durable_head(self, agent_id: str) -> int:
        head = await self.durable.head(agent_id)
        if head == 0 and self.cold is not None:
            head = await self._rehydrate(agent_id)
        elif self.cold is not None and head < self._settled.get(agent_id, head + 1):
            head = await self._first_use(agent_id, head)
        elif self.cold is not None:
            self._settle_at(agent_id, head)
        return head

    def _settle_at(self, agent_id: str, head: int) -> None:
        """``agent_id`` is settled here, its durable head seen at ``head``."""
        self._set_settled(agent_id, max(head, self._settled.get(agent_id, 0)))

    def _set_settled(self, agent_id: str, head: int) -> None:
        """Remember ``agent_id`` settled at ``head``. Bounded: all forgotten when full,
        each then a first use again (its marker read once more). Was: one entry per
        agent a process ever touched, for the life of the worker (h/trialsoak: 50k
        agents written once, 50k entries)."""
        settled = self._settled
        if agent_id not in settled and len(settled) >= _SETTLED_MAX:
            settled.clear()
        settled[agent_id] = head

    async def _settle(self, agent_id: str) -> None:
        """Before this process first reads ``agent_id``: its cold marker is looked at (see
        :meth:`_first_use`), so a rehydration's part is never what the read returns."""
        if self.cold is not None and agent_id not in self._settled:
            await self._durable_head(agent_id)

    async def _first_use(self, agent_id: str, head: int, *, locked: bool = False) -> int:
        """The agent's durable head, after this process's first look at its cold marker:
        a stream below the marker's head is what an interrupted rehydration copied
        (a process killed part way), never the whole agent — it is copied again. A
        marker at or below the stream's head (a demotion under way in another process,
        or one that died before its last step) is left to that demotion."""
        if head == 0:
            return await self._rehydrate(agent_id, locked=locked)
        marker = await self._marker(agent_id)
        if marker is None:
            self._set_settled(agent_id, head)  # (a stream deleted and written again: lower)
        elif head < marker.head_seq:
            return await self._rehydrate(agent_id, locked=locked)
        return head

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

    async def rewrite(self, request: RewriteRequest) -> None:
        """Rewrite in the durable tier (see :meth:`Backend.rewrite`); the hot copy is
        dropped and refilled from the new bytes on the next read."""
        self._check_can_write()
        await self._check_hot(request.agent_id)
        async with self._locks.hold(request.agent_id):
            if self.cold is not None:
                await self._rehydrate(request.agent_id, locked=True)
            await self.durable.rewrite(request)
            if self.hot is not None:
                await self._drop_hot(request.agent_id)

    async def rename_keys(self, agent_id: str, renames: Sequence[tuple[str, str]]) -> int:
        """Rename in the durable tier (a demoted agent brought back first, as for a
        rewrite); the hot copy is dropped and refilled on the next read."""
        self._check_can_write()
        self.require(Capability.KEY_RENAME)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
            done = await self.durable.rename_keys(agent_id, renames)
            if self.hot is not None:
                await self._drop_hot(agent_id)
            return done

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Prune in the durable tier (see :meth:`Backend.prune`: its atomic step
        compares ``head`` and ``checksum``); the hot copy is dropped and refilled,
        compacted, on the next read."""
        self._check_can_write()
        self.require(Capability.PRUNE)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
            if head is None and checksum is None:  # (also an override without them)
                await self.durable.prune(agent_id, base_seq, drop_snapshots)
            else:
                await self.durable.prune(agent_id, base_seq, drop_snapshots, head, checksum)
            if self.hot is not None:
                await self._drop_hot(agent_id)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
    ) -> AppendResult:
        """Create the compacted stream in the durable tier (a demoted agent exists: a
        conflict, as anywhere); the hot copy is filled on the next read."""
        self._check_can_write()
        self.require(Capability.BASE_IMPORT)
        validate_from_base(request, base, kept_keys)
        refused = self._too_long(request.agent_id)
        if refused is not None:
            raise refused
        agent_id = request.agent_id
        self._touch(agent_id)
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            if self.cold is not None:
                await self._rehydrate(agent_id, locked=True)
            result = await self.durable.append_from_base(
                request, base, kept_keys, **({"raise_floor": True} if raise_floor else {})
            )
            if self.hot is not None:
                await self._drop_hot(agent_id)  # whatever an older process left there
        return result

    # leases live in the durable tier: it checks fences atomically with the append

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

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Expire the records where they are: in the durable tier and (a demoted
        agent's) the cold one, an agent's under its lock (no demotion or rehydration
        moves them meanwhile); the hot tier's copies too where it can (a cache: its
        records answer no lookup). Nothing is brought back from the cold tier."""
        self._check_open()
        self.require(Capability.KEY_EXPIRY)
        before = check_expiry(agent_id, before)
        if not count_only:
            self._check_can_write()

        async def each() -> int:
            total = await self.durable.expire_keys(agent_id, before, count_only=count_only)
            cold = self.cold
            if cold is not None:  # only its own demoted agents' copies (a shared cold tier)
                if agent_id is None:
                    owns = await self._own_demoted_copies(cold)
                else:
                    owns = await self._own_copies(cold, [agent_id], strict=True)
                for own in owns:
                    total += await cold.expire_keys(own, before, count_only=count_only)
            hot = self.hot
            if not count_only and hot is not None and hot.supports(Capability.KEY_EXPIRY):
                with contextlib.suppress(StatekeeperError):  # (a cache: best effort)
                    await hot.expire_keys(agent_id, before)
            return total

        if agent_id is None:
            return await each()
        async with self._locks.hold(agent_id):
            return await each()

    async def _demoted_ids(self) -> list[str]:
        """The ids of every agent this store's durable markers say it demoted."""
        out: list[str] = []
        after = COLD_MARKER
        while True:
            page = await self.durable.list_agents(after=after, limit=_PAGE)
            out += [i.agent_id[len(COLD_MARKER) :] for i in page if _is_marker(i.agent_id)]
            if len(page) < _PAGE or not _is_marker(page[-1].agent_id):
                return out
            after = page[-1].agent_id

    async def _own_demoted_copies(self, cold: Backend) -> list[str]:
        """:meth:`_own_copies` of every agent this store demoted, a page of markers at a
        time (three batched head reads a page: the markers, the durable streams, the
        cold copies); a copy that fails the check is passed over with a warning."""
        out: list[str] = []
        after = COLD_MARKER
        while True:
            page = await self.durable.list_agents(after=after, limit=_PAGE)
            markers = [i.agent_id for i in page if _is_marker(i.agent_id)]
            ids = [m[len(COLD_MARKER) :] for m in markers]
            if ids:
                bodies = await self.durable.read_heads(markers)
                streams = await self.durable.read_heads(ids)
                copies = await cold.read_heads(ids)
                for agent_id, mark, stream, copy in zip(ids, bodies, streams, copies, strict=True):
                    body = marker_body([mark]) if mark is not None else None
                    head = body.get("head") if body is not None else None
                    if body is None or not isinstance(head, int):
                        continue
                    if mark is not None and _is_claim(body | {"_seq": mark.seq}):
                        continue  # (a claim: the durable stream, if any, is the agent)
                    if stream is not None and stream.seq >= head:
                        continue  # (the durable stream is the agent)
                    ours = head_is_demoted(copy, body)
                    if ours is None:  # a marker of an earlier version: the whole check
                        ours = bool(await self._own_copies(cold, [agent_id], strict=False))
                    elif not ours:
                        logger.warning(
                            "the cold tier's copy of agent %r is not the one this store"
                            " demoted (another store's sharing the cold tier?): passed over",
                            agent_id,
                        )
                    if ours:
                        out.append(agent_id)
            if len(page) < _PAGE or not _is_marker(page[-1].agent_id):
                return out
            after = page[-1].agent_id

    async def _own_copies(
        self, cold: Backend, agent_ids: Sequence[str], *, strict: bool
    ) -> list[str]:
        """Those of ``agent_ids`` whose cold copy is this store's demoted agent: a marker
        here, no whole stream beside it (a demotion that died before its last step: the
        durable stream is the agent), and the copy the marker says (not another store's
        sharing the cold tier: :func:`check_demoted_copy`). A copy that fails the check
        raises its :class:`~statekeeper.errors.IntegrityError` when ``strict``, else is
        passed over with a warning."""
        out = []
        for agent_id in agent_ids:
            entry = await self._marker_entry(agent_id)
            if entry is None or await self.durable.head(agent_id) >= entry[0].head_seq:
                continue
            if _is_claim(entry[1]):
                continue
            try:
                await check_demoted_copy(cold, agent_id, entry[1], "nothing was expired")
            except IntegrityError as exc:
                if strict:
                    raise
                logger.warning("%s", exc)
                continue
            out.append(agent_id)
        return out

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

    # -- the change feed: the durable tier's (without a cold tier) -------------------

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

    async def drop_all(self) -> int | None:
        """``drop_all`` on the hot and durable tiers; in the cold tier, only the copies of
        this store's demoted agents (a cold tier may be shared with other stores: theirs
        are left), before the durable tier's markers that name them go."""
        self._check_open()
        self.require(Capability.DROP_ALL)
        self._check_writable()
        if self.hot is not None:
            await self.hot.drop_all()
        cold = self.cold
        if cold is not None:  # its own copies only: a cold tier may be shared
            for agent_id in await self._demoted_ids():
                entry = await self._marker_entry(agent_id)
                if entry is not None and await self._own_copy(cold, agent_id, entry):
                    await cold.delete_agent(agent_id)
        await self.durable.drop_all()
        self._dirty.clear()
        self._last_used.clear()
        self._settled.clear()
        return None

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        self._check_open()
        if limit <= 0:
            return []
        live: list[AgentInfo] = []
        cursor = after
        while len(live) < limit:
            want = limit - len(live)
            page = await self.durable.list_agents(after=cursor, limit=want)
            live.extend(info for info in page if not _is_marker(info.agent_id))
            if len(page) < want:
                break
            last = page[-1].agent_id
            cursor = _MARKER_CEIL if _is_marker(last) else last
        if self.cold is None:
            return live[:limit]
        demoted = await self._demoted(after, limit)
        merged: dict[str, AgentInfo] = {info.agent_id: info for info in demoted}
        for info in live:  # durable wins, but for the part of an interrupted rehydration
            if info.agent_id not in merged or info.head_seq >= merged[info.agent_id].head_seq:
                merged[info.agent_id] = info
        return [merged[k] for k in sorted(merged)][:limit]

    async def _demoted(self, after: str | None, limit: int) -> list[AgentInfo]:
        cursor = COLD_MARKER + after if after is not None else COLD_MARKER
        page = await self.durable.list_agents(after=cursor, limit=limit)
        out: list[AgentInfo] = []
        for info in page:
            if not _is_marker(info.agent_id):
                break
            entry = await self._marker_entry(info.agent_id[len(COLD_MARKER) :])
            if entry is not None and not _is_claim(entry[1]):
                out.append(entry[0])
        return out

    async def count_agents(self) -> int:
        """Each agent once, as :meth:`list_agents` lists them: a demoted agent is its
        marker, and a marker a crash left beside a durable stream (a demotion that died
        before its last step, the part a killed rehydration copied) is not a second
        agent, nor a demotion's claim beside no stream (the agent deleted under it)."""
        self._check_open()
        count = await self.durable.count_agents()
        if self.cold is None:
            return count
        return count - await self._doubled("")

    async def _doubled(self, prefix: str) -> int:
        """Markers of agents under ``prefix`` the durable tier counts that are no agent
        of their own (:meth:`list_agents` skips them): beside a durable stream (its
        agent counted already), or a demotion's claim (:func:`_is_claim`) or an
        unreadable marker beside none. One listing of the markers, two batches of head
        reads per page of them."""
        start = COLD_MARKER + prefix
        doubled = 0
        after = start
        if prefix and await self.durable.head(start) > 0:  # (listings start after it)
            doubled += await self._not_agents([start])
        while True:
            page = await self.durable.list_agents(after=after, limit=_PAGE)
            markers = [info.agent_id for info in page if info.agent_id.startswith(start)]
            if markers:
                doubled += await self._not_agents(markers)
            if len(markers) < _PAGE:
                return doubled
            after = page[-1].agent_id

    async def _not_agents(self, markers: list[str]) -> int:
        """How many of ``markers`` (durable marker ids) :meth:`list_agents` lists no
        agent for: a durable stream beside it (the agent listed once, from it), or a
        claim or unreadable marker beside none (see :meth:`_demoted`)."""
        heads = await self.durable.read_heads([m[len(COLD_MARKER) :] for m in markers])
        bodies = await self.durable.read_heads(markers)
        out = 0
        for head, mark in zip(heads, bodies, strict=True):
            if head is not None:
                out += 1
                continue
            if mark is None:  # (deleted meanwhile: left as the durable tier counted)
                continue
            body = marker_body([mark])
            out += body is None or _is_claim(body | {"_seq": mark.seq})
        return out

    async def count_prefix(self, prefix: str) -> int:
        """Agents whose id starts with ``prefix``, demoted ones included: a demoted
        agent is its marker in the durable tier, counted under the marker's own prefix
        (a namespaced store's count used to leave every demoted agent out)."""
        self._check_open()
        count = await self.durable.count_prefix(prefix)
        if self.cold is None:
            return count
        if COLD_MARKER.startswith(prefix):  # (the markers are under that prefix already)
            return count - await self._doubled("") if prefix == "" else count
        markers = await self.durable.count_prefix(COLD_MARKER + prefix)
        return count + markers - (await self._doubled(prefix) if markers else 0)

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

    # -- the hot copy --------------------------------------------------------------

    async def _fill(self, agent_id: str) -> None:
        """Copy the agent's stream and snapshots into the hot tier (lazily)."""
        hot = self.hot
        if hot is None or not self.hot_available() or agent_id in self._dirty:
            return
        async with self._locks.hold(agent_id):
            head, tag = await self.durable.head_tag(agent_id)
            if head == 0 or head > self.fill_limit:
                return
            current = await self._hot_call(lambda h: h.head_tag(agent_id), [agent_id], write=False)
            if isinstance(current, _Miss) or current == (head, tag):
                return
            try:
                result = await self._hot_call(
                    lambda h: self._copy_to_hot(h, agent_id, head),
                    [agent_id],
                    write=True,
                    budget=self.hot_timeout * (2 + head / _PAGE),
                )
            except ConflictError:
                result = _MISS
            if isinstance(result, _Miss):
                await self._drop_hot(agent_id)
                return
            # a writer in another process may have moved the head meanwhile
            if await self.durable.head_tag(agent_id) != (head, tag):
                await self._drop_hot(agent_id)
                return
            self.stats["fills"] += 1

    async def _copy_to_hot(self, hot: Backend, agent_id: str, head: int) -> None:
        await hot.delete_agent(agent_id)
        tag_head, tag = await self.durable.head_tag(agent_id)
        if tag_head != head:
            raise ConflictError(agent_id, head, tag_head)  # moved meanwhile: try later
        base = await _base_of(self.durable, agent_id)
        if base is not None and not hot.supports(Capability.BASE_IMPORT):
            raise ConflictError(agent_id, head, 0)  # a compacted stream stays out of it
        seq = 0 if base is None else base.seq
        while seq < head:
            events = await self.durable.read(agent_id, seq, head, limit=_PAGE)
            if not events:
                raise IntegrityError(agent_id, seq + 1, "stream ended while copying to hot")
            last = events[-1].seq == head
            await _append_copy(
                hot,
                AppendRequest(agent_id, seq, tuple(events), head_tag=tag if last else None),
                base,
                (),  # (the hot copy holds no idempotency keys: the durable tier's are asked)
            )
            seq = events[-1].seq
        for snap in await _snapshots(self.durable, agent_id):
            await hot.save_snapshot(agent_id, snap)

    # -- the cold tier -------------------------------------------------------------

    async def _marker(self, agent_id: str) -> AgentInfo | None:
        entry = await self._marker_entry(agent_id)
        return None if entry is None else entry[0]

    async def _marker_entry(self, agent_id: str) -> tuple[AgentInfo, dict[str, Any]] | None:
        """``agent_id``'s cold marker, and its JSON body (None: not demoted), with the
        marker stream's head (``_seq``: 1, a demotion's claim; 2, a demotion done, the
        agent's stream deleted; 1 too for a marker of an earlier version) and its claim
        token (``_token``, hex: the checksum of its records)."""
        if _is_internal(agent_id):  # never demoted (and its marker's id would be invalid)
            return None
        events = await self.durable.read(COLD_MARKER + agent_id, 0, None, limit=2)
        body = marker_body(events)
        if body is None:
            return None
        body = body | {"_seq": events[-1].seq, "_token": events[-1].checksum.hex()}
        info = AgentInfo(
            agent_id, int(body["head"]), float(body["created"]), float(body["updated"])
        )
        return info, body

    async def demote_idle(self, now: float | None = None) -> list[str]:
        """Demote every agent idle longer than ``idle_after``; returns their ids."""
        self._check_can_write()
        if self.cold is None or self.idle_after is None:
            return []
        cutoff = (self.clock() if now is None else now) - self.idle_after
        idle: list[str] = []
        after: str | None = None
        while True:
            page = await self.durable.list_agents(after=after, limit=_PAGE)
            for info in page:
                if _is_internal(info.agent_id):
                    continue
                if info.updated_at < cutoff and self._last_used.get(info.agent_id, 0.0) < cutoff:
                    idle.append(info.agent_id)
            if len(page) < _PAGE:
                break
            after = page[-1].agent_id
        demoted = []
        for agent_id in idle:
            if await self.demote(agent_id):
                demoted.append(agent_id)
        return demoted

    async def demote(self, agent_id: str) -> bool:
        """Move one agent to the cold tier now. False if it has no durable stream, if
        another demotion of it holds the claim (its marker), or if it was written to
        meanwhile (the write is kept).

        The marker's creation is the claim: a conditional insert (expected seq 0) whose
        record carries a token of this demotion's own, made before the cold tier is
        touched. Another demotion of the agent (another process's: every process's
        demotion loop finds the same idle agents) that finds a marker backs off without
        a write; a demotion deletes only the cold copy and the marker it wrote itself,
        and its delete of the durable stream is conditional on the head record it copied
        — and, where the durable tier commits several streams at once, made in one
        commit with the marker's second record (the demotion done), conditional on the
        claim still being its own: so a claim whose demotion was killed is taken over
        (:meth:`_take_over`) without letting the owner, were it still alive, delete the
        stream under the new claim.
        """
        self._check_can_write()
        cold = self.cold
        if cold is None:
            raise ConfigurationError("no cold tier to demote to")
        await self._check_hot(agent_id)
        async with self._locks.hold(agent_id):
            head = await self.durable.head(agent_id)
            if head == 0:
                return False
            entry = await self._marker_entry(agent_id)
            if entry is not None and not await self._take_over(agent_id, entry, head):
                return self._claimed(agent_id)
            first = await self.durable.read(agent_id, 0, None, limit=1)
            last = await self.durable.read(agent_id, head - 1, head)
            if not first or not last:
                raise IntegrityError(agent_id, head, "stream ends before its head")
            token = secrets.token_bytes(16)
            fenced = self._fenced()
            body = orjson.dumps(
                {
                    "head": head,
                    "created": first[0].timestamp,
                    "updated": last[0].timestamp,
                    "last": record_digest(last[0]),
                }
                | ({"claimed": self.clock(), "owner": claim_owner()} if fenced else {})
            )  # ("last": the demoted head's digest, checked again by a rehydration)
            IN_FLIGHT.add(token)
            try:
                return await self._demote_claimed(
                    cold, agent_id, head, (first[0], last[0]), token, body
                )
            finally:
                IN_FLIGHT.discard(token)

    def _fenced(self) -> bool:
        """Does the durable tier commit a demotion's last step with its claim's check
        (several streams in one commit, a head tag compared)? Else claims record no
        owner and are never taken over."""
        durable = self.durable
        return durable.appends_together and durable.compares_head_tag

    async def _demote_claimed(
        self,
        cold: Backend,
        agent_id: str,
        head: int,
        ends: tuple[RawEvent, RawEvent],
        token: bytes,
        body: bytes,
    ) -> bool:
        """:meth:`demote` from its claim on (``token``; ``body`` the marker's)."""
        marker_id = COLD_MARKER + agent_id
        fenced = self._fenced()
        try:
            await self.durable.append(
                AppendRequest(
                    marker_id,
                    0,
                    (RawEvent(1, "cold", self.clock(), body, token),),
                    head_tag=token if fenced else None,
                )
            )
        except ConflictError:
            return self._claimed(agent_id)  # another demotion claimed it first
        if not await self._copy_claimed(cold, agent_id, head, ends, token):
            return False
        last = ends[1]
        try:  # conditional: a write meanwhile (another process's) is kept, not deleted,
            # and so is a rewrite (a migration, a rekey) to the same head
            if fenced:  # and only while the claim is its own (not taken over)
                done = RawEvent(2, "cold", self.clock(), body, token)
                await self.durable.append_together(
                    [
                        AppendRequest(
                            marker_id,
                            1,
                            (done,),
                            head_tag=token,
                            expected_tag=token,
                            check_tag=True,
                        )
                    ],
                    [StreamChange(agent_id, delete_at=head, delete_checksum=last.checksum)],
                )
            else:
                await self.durable.delete_agent_at(agent_id, head, last.checksum)
        except ConflictError as exc:
            if exc.agent_id != marker_id:
                # the stream written to, or deleted, meanwhile: its claim ended (its own
                # copy, then its marker, both conditional). Was: only if the stream was
                # still there — a delete that read no marker (this claim came after) left
                # the claim and its whole copy beside no stream, and the next load took
                # the agent for demoted and brought the deleted agent back
                await self._release(cold, agent_id, token, (head, last.checksum))
            # the agent deleted, its claim ended by that delete (which read the copy before
            # it was whole: not its to delete): this demotion's whole copy, no marker nor
            # stream beside it, is dropped. Was: kept — the deleted agent's data in the
            # cold tier, and a demotion of a new agent of that id refused
            await self._drop_orphan(cold, agent_id, [last])
            return False  # (the marker's: its claim taken over, left to the new one)
        if self.hot is not None:
            await self._drop_hot(agent_id)
        self._last_used.pop(agent_id, None)
        self._settled.pop(agent_id, None)  # (its next use here looks at the marker again)
        self.stats["demotions"] += 1
        logger.info("demoted agent %r (head %d) to the cold tier", agent_id, head)
        return True

    async def _take_over(
        self, agent_id: str, entry: tuple[AgentInfo, dict[str, Any]], head: int
    ) -> bool:
        """Take over the claim ``entry`` of a demotion that died after it (True: the
        marker deleted, claim again), or leave it (False). Only a claim (a marker of
        one record, beside the whole stream: its demotion never finished) made with
        the fenced last step (:meth:`_fenced`: had its owner lived on, its delete of the
        stream fails once the claim is not its own), older than ``_CLAIM_STALE``, whose
        owner is provably gone (:func:`~.tiered_cold.owner_gone`); the marker's delete
        is conditional on that claim (of two demotions taking it over, one does). A
        rehydration is never under such a marker (its demotion did not delete the
        stream), and a marker of an earlier version names no owner: never taken over."""
        body = entry[1]
        claimed = body.get("claimed")
        if (
            not self._fenced()
            or body.get("_seq") != 1
            or head < entry[0].head_seq
            or not isinstance(claimed, int | float)
            or self.clock() - claimed < _CLAIM_STALE
        ):
            return False
        token = bytes.fromhex(body["_token"])
        if not owner_gone(body.get("owner"), token):
            return False
        try:
            await self.durable.delete_agent_at(COLD_MARKER + agent_id, 1, token)
        except ConflictError:
            return False
        logger.warning(
            "agent %r: took over the claim of a demotion whose process is gone (%s)",
            agent_id,
            body.get("owner"),
        )
        return True

    @staticmethod
    def _claimed(agent_id: str) -> bool:
        """A demotion that found the agent's marker: False, nothing written. (A marker
        beside the whole stream that stays there is a demotion that died after its
        claim, taken over later (:meth:`_take_over`), or a rehydration that died before
        its end: nothing is lost — the durable stream is the agent, read there — but
        such an agent is not demoted again until it is deleted.)"""
        logger.info(
            "agent %r not demoted: its cold marker is there (another demotion's claim, a"
            " rehydration under way, or a demotion that died after its claim)",
            agent_id,
        )
        return False

    async def _copy_claimed(
        self,
        cold: Backend,
        agent_id: str,
        head: int,
        ends: tuple[RawEvent, RawEvent],
        token: bytes,
    ) -> bool:
        """Copy the claimed agent (at ``head``, its first and head records ``ends``) into
        the cold tier: True; or release the claim (:meth:`_release`) and return False if
        the stream was written to (or deleted) meanwhile, else raise."""
        last = ends[1]
        try:
            await self._check_cold_copy(cold, agent_id)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._release(None, agent_id, token)  # (not its copy: left alone)
            raise
        wrote: list[RawEvent] = []
        try:
            await cold.delete_agent(agent_id)  # an older archive copy of this stream
            await _copy_stream(self.durable, cold, agent_id, head, all_snapshots=True, wrote=wrote)
            if await cold.head(agent_id) != head:
                raise IntegrityError(agent_id, head, "cold copy is incomplete")
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self._release(cold, agent_id, token)
                await self._drop_orphan(cold, agent_id, wrote)
            if isinstance(exc, ConflictError | IntegrityError) and await self._moved(
                agent_id, head, last
            ):
                return False  # written or deleted meanwhile: not demoted, nothing lost
            raise
        return True

    async def _drop_orphan(self, cold: Backend, agent_id: str, wrote: list[RawEvent]) -> None:
        """After a demotion's copy or its last step failed: if the agent was deleted
        meanwhile (its marker, the claim, and its stream gone — the delete took the part
        copied by then, or ended the claim before the copy was whole), delete what this
        demotion copied after that delete, no marker naming it: a cold copy
        whose head record is one this demotion wrote (``wrote``: the last record of each
        page it appended; the checksum binds the records before it), by a delete
        conditional on it. Was: a copy whose *first* record was this stream's — another
        store's sharing the cold tier whose agent shares that first record (a store
        restored from a backup of this one, written on since) demoted meanwhile was
        deleted, its only copy."""
        marker_id = COLD_MARKER + agent_id
        if await self.durable.head(marker_id) or await self.durable.head(agent_id):
            return
        held = await cold.head(agent_id)
        ours = next((e for e in wrote if e.seq == held), None)
        if ours is None:
            return
        copied = await cold.read(agent_id, held - 1, held)
        if copied and same_record(copied[0], ours):
            with contextlib.suppress(ConflictError):
                await cold.delete_agent_at(agent_id, held, ours.checksum)

    async def _moved(self, agent_id: str, head: int, last: RawEvent) -> bool:
        """Is the durable stream no longer the one a demotion read (``head``, its head
        record ``last``)?"""
        if await self.durable.head(agent_id) != head:
            return True
        return await self.durable.head_checksum(agent_id, head) != last.checksum

    async def _release(
        self,
        cold: Backend | None,
        agent_id: str,
        token: bytes,
        copied: tuple[int, bytes] | None = None,
    ) -> None:
        """End a demotion's claim if the marker is still its own (``token``): its copy
        in ``cold`` first (None: it wrote none; ``copied``: only while the copy is the
        whole one it wrote, that head and head checksum), then its marker, by a delete
        conditional on the token. A marker that is not its own (its claim ended by a
        delete of the agent, another demotion's since) and that demotion's cold copy
        are never touched."""
        marker_id = COLD_MARKER + agent_id
        held = await self.durable.read(marker_id, 0, 1)
        if not held or held[0].checksum != token:
            return
        if cold is not None and copied is None:
            await cold.delete_agent(agent_id)
        elif cold is not None and copied is not None:
            with contextlib.suppress(ConflictError):
                await cold.delete_agent_at(agent_id, *copied)
        with contextlib.suppress(ConflictError):
            await self.durable.delete_agent_at(marker_id, 1, token)

    async def _check_cold_copy(self, cold: Backend, agent_id: str) -> None:
        """Refuse (:class:`~statekeeper.errors.ConfigurationError`) to replace a copy of
        ``agent_id`` in the cold tier that is not this store's (:meth:`_own_copy`): a
        copy a crashed demotion or rehydration left is; another store's demotion of an
        agent of that id (two tiered stores sharing one cold tier) is not — replacing it
        deleted that store's only copy of its agent, and that store's next load served
        this one's."""
        held = await cold.head(agent_id)
        if held == 0 or await self._own_copy(cold, agent_id, None):
            return
        raise ConfigurationError(
            f"the cold tier {cold!r} holds agent {agent_id!r} (head {held}) that is not a"
            " copy of this store's stream: another store sharing the cold tier demoted an"
            " agent of that id, and replacing it would delete that store's only copy; give"
            " each tiered store a cold tier of its own (another bucket prefix). Or it is the"
            " copy of an agent of that id this store deleted, left there when deleting it"
            " from the cold tier failed (that delete said so): if no other store shares the"
            " cold tier, delete it from the cold tier alone (`statekeeper delete <the cold"
            f" tier's URL> {agent_id!r}`) and demote again. Nothing was demoted"
        )

    async def _rehydrate(self, agent_id: str, *, locked: bool = False) -> int:
        """Bring a demoted agent back to the durable tier; its head, or 0 if not demoted.

        ``locked``: the caller holds the agent's lock already.
        """
        cold = self.cold
        if cold is None or _is_internal(agent_id):
            return 0
        marker_id = COLD_MARKER + agent_id
        if await self.durable.head(marker_id) == 0:
            if agent_id not in self._settled:
                self._set_settled(agent_id, 0)
            return 0
        if not locked:
            await self._locks.acquire(agent_id)
        try:
            entry = await self._marker_entry(agent_id)
            if entry is None:  # rehydrated meanwhile
                head = await self.durable.head(agent_id)
                self._set_settled(agent_id, head)
                return head
            marker, body = entry
            head = await self.durable.head(agent_id)
            if head >= marker.head_seq or _is_claim(body):
                # a demotion's marker beside the whole stream: its claim, the demotion under
                # way in another process (its copy, then its conditional delete of the
                # stream) or dead before its end. Not
                # a rehydration's to end: deleting the marker and the cold copy here while
                # the demotion went on deleted the stream too — the agent lost everywhere
                # (another process's create of it, conflicting, did that). Nor is a claim
                # beside less (:func:`_is_claim`): the stream deleted under it, the
                # agent deleted — was brought back from the claim's whole cold copy
                return head
            if head > 0:
                # the part an interrupted rehydration copied (the cold tier still holds
                # the whole stream): copied again from the start, never taken as all
                await self._drop_partial(agent_id, marker.head_seq)
                head = await self.durable.head(agent_id)
                if head >= marker.head_seq:
                    # that rehydration finished its copy meanwhile: its end (the cold copy
                    # and the marker deleted) is its own. Was: ended here too — with that
                    # one's end and a demotion since in between, that demotion's cold copy
                    # and marker were deleted, then its delete of the stream went through
                    return head
            if head == 0:
                await check_demoted_copy(cold, agent_id, body)
                try:
                    await _copy_stream(
                        cold, self.durable, agent_id, marker.head_seq, all_snapshots=True
                    )
                except (ConflictError, IntegrityError):
                    if await self._marker_entry(agent_id) is None:
                        # another process brought it back meanwhile (and deleted the
                        # cold copy read here): the agent is its copy, nothing is wrong
                        head = await self.durable.head(agent_id)
                        self._set_settled(agent_id, head)
                        return head
                    with contextlib.suppress(Exception):  # (else the next use drops it)
                        await self._drop_partial(agent_id, marker.head_seq)
                    raise
                except BaseException:
                    with contextlib.suppress(Exception):  # (else the next use drops it)
                        await self._drop_partial(agent_id, marker.head_seq)
                    raise
                head = marker.head_seq
            elif head < marker.head_seq:
                raise IntegrityError(
                    agent_id, marker.head_seq, f"a partial copy at {head} could not be dropped"
                )
            # the cold copy first: a process killed between the two leaves the marker
            # beside the whole stream (harmless: see above), never a cold copy no marker
            # claims (a deleted agent's data kept, and a later demotion of the id refused).
            # Both only while they are what this rehydration copied and the marker it read:
            # a delete of the agent, then a demotion of a new one of that id, meanwhile
            # made another (its copy and claim, deleted here, and its stream by it)
            await self._drop_copied(cold, agent_id, head, body)
            self._set_settled(agent_id, head)
            self.stats["rehydrations"] += 1
            logger.info("rehydrated agent %r (head %d) from the cold tier", agent_id, head)
            return head
        finally:
            if not locked:
                self._locks.release(agent_id)

    async def _drop_copied(
        self, cold: Backend, agent_id: str, head: int, body: dict[str, Any]
    ) -> None:
        """A rehydration's end: the cold copy it copied back (at ``head``, the head
        record the durable copy has), then the marker (``body``) it read."""
        checksum = await self.durable.head_checksum(agent_id, head)
        if checksum is not None:  # (None: deleted meanwhile, its cold copy first)
            with contextlib.suppress(ConflictError):
                await cold.delete_agent_at(agent_id, head, checksum)
        with contextlib.suppress(ConflictError):
            await self.durable.delete_agent_at(
                COLD_MARKER + agent_id, body["_seq"], bytes.fromhex(body["_token"])
            )

    async def _drop_partial(self, agent_id: str, marker_head: int) -> None:
        """Delete what an interrupted rehydration copied into the durable tier (a part
        of the stream the cold tier holds whole), if that is what is there."""
        head = await self.durable.head(agent_id)
        if 0 < head < marker_head and self.cold is not None:
            # only the copy's own records: the head event must be the cold copy's at
            # that seq (an append acknowledged on top of a part — by a process that read
            # it as the agent — was deleted with it)
            copied = await self.cold.read(agent_id, head - 1, head)
            if not copied or copied[0].seq != head:
                return
            with contextlib.suppress(ConflictError):  # moved: the caller looks again
                await self.durable.delete_agent_at(agent_id, head, copied[0].checksum)

    async def _maintain(self) -> None:
        assert self.demote_interval is not None
        while not self._closed:
            await asyncio.sleep(self.demote_interval)
            try:
                await self.demote_idle()
            except StoreClosed:
                return
            except Exception:  # keep the loop alive; the next round retries
                logger.exception("demoting idle agents failed")

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


def _is_claim(body: dict[str, Any]) -> bool:
    """Is the marker ``body`` (:meth:`TieredBackend._marker_entry`'s) a demotion's claim
    made with the fenced last step (its owner recorded) and never done: one record?
    Such a demotion never deleted the stream — it deletes it only in the commit of the
    marker's second record — so the durable stream, whatever is there (nothing: the
    agent deleted under the claim), is the agent, never its cold copy. (A marker of an
    earlier version, or of a durable tier without that step, records no owner.)"""
    return body.get("_seq") == 1 and "claimed" in body


async def _copy_stream(
    src: Backend,
    dst: Backend,
    agent_id: str,
    head: int,
    *,
    all_snapshots: bool,
    wrote: list[RawEvent] | None = None,
) -> None:
    """Append the agent's events 1..head from ``src`` to (empty) ``dst``, keeping the
    idempotency keys (when both tiers can list them) and the snapshots; ``wrote`` gets
    the last record of each page appended."""
    keyed: dict[int, tuple[str, int]] = {}
    kept: list[tuple[str, int, int]] = []  # (records of the appends a prune removed or cut in two)
    why = f"copying agent {agent_id!r} between tiers keeps its idempotency keys"
    src.require(Capability.KEY_EXPORT, why)
    dst.require(Capability.KEY_EXPORT, why)
    base = await _base_of(src, agent_id)
    seq = 0 if base is None else base.seq
    cut = 0  # the last seq of an append a prune cut in two (0: none)
    for name, first, last in await src.idempotency_keys(agent_id):
        if first <= seq:  # a prune removed its events (or those up to the base): its
            kept.append((name, first, last))  # record is written with the base, whole
            cut = max(cut, last if last > seq else 0)
            continue
        keyed[first] = (name, last)
    starts = sorted(keyed)
    tag_head, tag = await src.head_tag(agent_id)
    if tag_head != head:
        raise IntegrityError(agent_id, head, f"head moved to {tag_head} while copying tiers")
    while seq < head:
        key: str | None = None
        if seq + 1 in keyed:
            key, end = keyed[seq + 1]
            events = await src.read(agent_id, seq, end)
        elif cut > seq:  # the rest of an append a prune cut in two: in the first page
            events = await src.read(agent_id, seq, cut)
        else:
            nxt = next((s for s in starts if s > seq + 1), head + 1)
            events = await src.read(agent_id, seq, min(nxt - 1, head), limit=_PAGE)
        if not events or events[0].seq != seq + 1:
            raise IntegrityError(agent_id, seq + 1, "stream has a gap while copying tiers")
        last = events[-1].seq == head
        await _append_copy(
            dst,
            AppendRequest(agent_id, seq, tuple(events), None, key, head_tag=tag if last else None),
            base,
            kept,
        )
        if wrote is not None:
            wrote.append(events[-1])
        seq = events[-1].seq
    for snap in await _snapshots(src, agent_id, all_snapshots=all_snapshots):
        await dst.save_snapshot(agent_id, snap)


async def _base_of(src: Backend, agent_id: str) -> RawSnapshot | None:
    """The base snapshot of a compacted stream (None: a whole stream)."""
    (base_seq,) = await src.stream_bases([agent_id])
    if base_seq == 0:
        return None
    base = await src.latest_snapshot(agent_id, base_seq)
    if base is None or base.seq != base_seq:
        raise IntegrityError(agent_id, base_seq, "a compacted stream without its base snapshot")
    return base


async def _append_copy(
    dst: Backend, request: AppendRequest, base: RawSnapshot | None, kept: KeptKeys
) -> None:
    """Append a copied page; the first one of a compacted stream with its base (and
    the idempotency records ``kept`` of the appends its prune removed)."""
    if base is not None and request.expected_seq == base.seq and kept:
        await dst.append_from_base(request, base, kept)
    elif base is not None and request.expected_seq == base.seq:  # (older engines too)
        await dst.append_from_base(request, base)
    else:
        await dst.append(request)


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


async def _snapshots(
    src: Backend, agent_id: str, *, all_snapshots: bool = True
) -> list[RawSnapshot]:
    """The agent's snapshots in ``src``, oldest first (only the latest unless ``all``)."""
    snaps: list[RawSnapshot] = []
    below: int | None = None
    while True:
        snap = await src.latest_snapshot(agent_id, below)
        if snap is None:
            break
        snaps.append(snap)
        if not all_snapshots or snap.seq <= 1:
            break
        below = snap.seq - 1
    snaps.reverse()
    return snaps
