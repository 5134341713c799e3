"""Deletes and forgets in the change feed: a tombstone at the delete's position.

A delete removes the agent's events, and with them their feed positions; a ``forget``
(crypto-shredding) leaves them unreadable. Neither would tell a consumer that already
applied them to drop what it derived (a read model listing the agent for ever). So each
delete and forget also appends one *tombstone* record to a statekeeper stream (ids
starting ``"\\x01sk-feed/deleted"``: hidden from listings, like the audit log), which
the feed delivers at its position as a :class:`~statekeeper.records.FeedEvent` of type
:data:`AGENT_DELETED`: its ``agent_id`` is the agent deleted, its ``seq`` the head it
ended at, ``event.info["forgotten"]`` True for a forget.

**Atomic with the delete** where the engine commits several streams together
(``Backend.appends_together``: memory, SQLite, PostgreSQL, Redis on one server, sharded
too): the tombstone's append and the delete (``StreamChange(delete_at=head)``) are one
commit (a governed store's with its audit entry too), so a crash leaves both or
neither, and no append of the agent can fall between them. Elsewhere (Redis Cluster,
tiered, S3) the tombstone is appended right after the delete, through an intent
written before it (:mod:`.feed_intents`): a crash in between leaves the intent, which
the store's next delete (or ``verify``) finishes with the tombstone.

Under PostgreSQL row-level security (``Backend.audit_links``) each namespace has its own
tombstone stream (:func:`stream_of_namespace`), which the policy lets exactly the roles
that may write the namespace's agents append to (and those that may read them read),
and no tenant's role rewrite, delete or move the head of back (``sql/row_security.sql``);
a tombstone naming an agent outside its stream's namespace is refused as forged
(:func:`tombstone_event`). A forget destroys a key in the key vault, another database:
its tombstone follows, through an intent of the namespace written before the key goes
(:mod:`.feed_intents`; when ``purge=True`` the purge's delete writes the tombstone).

On a sharded store (Redis ``shards=N``) each shard has its own tombstone stream, in
that shard: a tombstone comes after the agent's events in the shard's feed, as the
per-agent order of a sharded feed requires.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, Capability
from ..codec import ZERO_LINK, Codec
from ..errors import AgentLost, ConflictError, IntegrityError, RetriesExhausted
from ..namespaces import namespace_of
from ..records import AppendRequest, Event, FeedEvent, FeedRecord, RawEvent, StreamChange
from .conditional import expected_checksum, expected_head

if TYPE_CHECKING:
    from .feed import FeedAccess
    from .store import StateStore

__all__ = [
    "AGENT_DELETED",
    "erase",
    "is_tombstone_stream",
    "record",
    "record_restored",
    "record_unless_created",
    "tombstone_event",
]

#: the type of a feed event that says its agent was deleted or forgotten
AGENT_DELETED = "statekeeper.agent_deleted"

_STREAM = "\x01sk-feed/deleted"
#: the tombstone streams of one namespace each (under row-level security)
_IN = _STREAM + "/in/"
_RETRIES = 50
#: tombstones per append of :func:`record_restored`
_PAGE = 256

#: set while ``forget`` purges an agent: its delete's tombstone says ``forgotten``
forgetting: ContextVar[bool] = ContextVar("statekeeper_forgetting", default=False)

#: the prefix of every per-namespace tombstone stream
PREFIX_IN = _IN

_per_shard: dict[tuple[int, int], str] = {}


def is_tombstone_stream(agent_id: str) -> bool:
    """True for a stream holding tombstones (its records are not an agent's events)."""
    return agent_id == _STREAM or agent_id.startswith(_STREAM + "/")


def stream_of_namespace(namespace: str) -> str:
    """The tombstone stream of the agents of ``namespace`` under row-level security:
    ``"\\x01sk-feed/deleted/in/<namespace>/-"``, whose part after ``/in/`` has the
    namespace ``namespace`` (the policy matches its grants against it)."""
    return f"{_IN}{namespace}/-"


def namespace_of_stream(stream: str) -> str | None:
    """The namespace whose tombstones ``stream`` holds; None for a stream of the whole
    store (or of a shard)."""
    if not stream.startswith(_IN) or not stream.endswith("/-"):
        return None
    return namespace_of(stream[len(_IN) :])


def has_feed(backend: Backend) -> bool:
    """Whether ``backend`` keeps a change feed (a sharded Redis one: unless opened
    with ``feed=False``) and writes its tombstones. Not on PostgreSQL whose row-level
    security was installed by a statekeeper before the namespaces' tombstone streams
    (``audit_links`` without ``tombstones_by_namespace``): its tenants' roles may write
    none (run ``enforce_in_postgres`` again: it installs the policy that knows them)."""
    if getattr(backend, "audit_links", False) and not getattr(
        backend, "tombstones_by_namespace", False
    ):
        return False
    if getattr(backend, "feed_shards", 1) != 1:
        return bool(getattr(backend, "feed", True))
    return backend.supports(Capability.FEED)


def stream_of(backend: Backend, agent_id: str) -> str:
    """The tombstone stream of ``agent_id``: the store's one, or on a sharded store the
    one that lives in the agent's shard; under row-level security the one of its
    namespace."""
    if getattr(backend, "tombstones_by_namespace", False):
        return stream_of_namespace(namespace_of(agent_id))
    shards = getattr(backend, "feed_shards", 1)
    if not isinstance(shards, int) or shards <= 1:
        return _STREAM
    return _in_shard(backend, shards, backend.feed_shard_of(agent_id))  # type: ignore[attr-defined]


def streams(backend: Backend) -> list[str]:
    """Every tombstone stream the store may hold (one per shard); under row-level
    security those of the namespaces are found by their prefix (:data:`PREFIX_IN`)."""
    shards = getattr(backend, "feed_shards", 1)
    if not isinstance(shards, int) or shards <= 1:
        return [_STREAM]
    return sorted({_in_shard(backend, shards, k) for k in range(shards)})


def _in_shard(backend: Backend, shards: int, target: int) -> str:
    shard_of = backend.feed_shard_of  # type: ignore[attr-defined]
    found = _per_shard.get((shards, target))
    n = 0
    while found is None:
        candidate = f"{_STREAM}/{n}"
        if shard_of(candidate) == target:
            found = _per_shard[(shards, target)] = candidate
        n += 1
    return found


async def tombstone_request(
    backend: Backend, codec: Codec, agent_id: str, head: int, forgotten: bool
) -> AppendRequest:
    """The append of the tombstone of ``agent_id`` (ended at ``head``) to its stream,
    for a commit of the caller's (a governed delete's, with its audit entry): a
    :class:`ConflictError` on that stream means another tombstone came first (build
    it again)."""
    stream = stream_of(backend, agent_id)
    return await _request(backend, codec, stream, agent_id, head, forgotten)


async def _request(
    backend: Backend, codec: Codec, stream: str, agent_id: str, head: int, forgotten: bool
) -> AppendRequest:
    """The append of one tombstone after the stream's head (:func:`_requests`)."""
    return await _requests(backend, codec, stream, [(agent_id, head)], forgotten)


async def _requests(
    backend: Backend,
    codec: Codec,
    stream: str,
    agents: list[tuple[str, int]],
    forgotten: bool,
) -> AppendRequest:
    """The append of the tombstones of ``agents`` (id, head) after the stream's head,
    each chained to the record before it, tagged as every stream's head (a backup
    verifies it so)."""
    base, tag = await backend.head_tag(stream)
    link = ZERO_LINK
    if base:
        last = await backend.read(stream, base - 1, base)
        if not last or last[-1].seq != base:
            raise ConflictError(stream, base, 0)  # moved meanwhile: read again
        raw_last = last[-1]
        link = codec.decode(
            stream,
            raw_last.seq,
            raw_last.type,
            raw_last.timestamp,
            raw_last.payload,
            raw_last.checksum,
        )[1].link
    ts = time.time()
    raws: list[RawEvent] = []
    for agent_id, head in agents:
        seq = base + 1 + len(raws)
        body = {"agent_id": agent_id, "head": head, "forgotten": forgotten}
        sealed = codec.encode(stream, seq, AGENT_DELETED, ts, body, link)
        raws.append(RawEvent(seq, AGENT_DELETED, ts, sealed.payload, sealed.checksum))
        link = sealed.link
    return AppendRequest(
        stream,
        base,
        raws,
        head_tag=codec.head_tag(stream, base + len(raws), link),
        expected_tag=tag,
        check_tag=backend.compares_head_tag,
    )


async def record(
    backend: Backend,
    codec: Codec,
    agent_id: str,
    head: int,
    *,
    forgotten: bool,
    key: str | None = None,
) -> None:
    """Append the tombstone of ``agent_id`` (ended at ``head``) on its own (retried over
    other writers' tombstones); ``key``: its idempotency key (a delete's intent's, see
    :mod:`.feed_intents`: appended once, whoever appends it). Nothing on an engine
    without a feed."""
    if not has_feed(backend):
        return
    stream = stream_of(backend, agent_id)
    await _append_retried(backend, codec, stream, [(agent_id, head)], forgotten=forgotten, key=key)


async def record_unless_created(
    backend: Backend,
    codec: Codec,
    agent_id: str,
    head: int,
    *,
    forgotten: bool,
    key: str | None = None,
) -> bool:
    """:func:`record` for a delete made before it in a commit of its own (through an
    intent: :mod:`.feed_intents`), unless the agent has events again: False then,
    nothing appended. Its position would follow the events of the agent created again
    since the delete, and every subscriber and projection would drop that live agent,
    no error (was: appended). The agent's head is read right before the append (no
    engine that deletes through an intent commits two streams together): a creation
    between that read and the append still gets the tombstone after its events, and
    the subscriptions pass over it (:mod:`.feed_late`)."""
    if await head_or_lost(backend, agent_id):
        return False
    await record(backend, codec, agent_id, head, forgotten=forgotten, key=key)
    return True


async def record_restored(backend: Backend, codec: Codec, agent_ids: list[str]) -> None:
    """Append a tombstone (head 0: not held here) of each of ``agent_ids`` before a
    restore that renews no feed id writes them (a tenant admin's:
    :func:`~statekeeper.governance.backup.restoretarget.renew_store_id`): a subscriber
    that still holds events of one — an agent expired (``ttl``) or deleted by an older
    version, which left no tombstone — drops them before the restored ones arrive as
    new appends (was: it applied the same events a second time, no error). A page of
    tombstones per append; a rerun writes them again (a delete again: nothing lost).

    One another process created since the caller found it absent raises
    :class:`ConflictError` naming it (as the caller's own write of it would) and no
    tombstone of its page is written (was: written, so every subscriber dropped what
    it derived from an agent still stored, and the restore or import was refused
    after). Where the engine checks absence in a commit
    (``Backend.checks_absence_together``: memory, SQLite, PostgreSQL, Redis on one
    server) each page's append is conditional on every agent of the page having no
    events, in the same commit, so no creation can fall between the check and the
    tombstones. Elsewhere the page's agents are read again right before its append:
    a creation between that read and the append gets its tombstone after its events,
    which the subscriptions pass over (:mod:`.feed_late`)."""
    if not has_feed(backend):
        return
    together = backend.appends_together and backend.checks_absence_together
    by_stream: dict[str, list[tuple[str, int]]] = {}
    for agent_id in dict.fromkeys(agent_ids):  # (each once)
        by_stream.setdefault(stream_of(backend, agent_id), []).append((agent_id, 0))
    for stream, agents in sorted(by_stream.items()):
        for at in range(0, len(agents), _PAGE):
            page = agents[at : at + _PAGE]
            if not together:
                heads = await asyncio.gather(*(head_or_lost(backend, a) for a, _ in page))
                for (agent_id, _), head in zip(page, heads, strict=True):
                    if head:
                        raise ConflictError(agent_id, 0, head)
            await _append_retried(backend, codec, stream, page, absent=together)


async def _append_retried(
    backend: Backend,
    codec: Codec,
    stream: str,
    agents: list[tuple[str, int]],
    *,
    forgotten: bool = False,
    key: str | None = None,
    absent: bool = False,
) -> None:
    """The tombstones of ``agents`` in ``stream`` (its head moved meanwhile: again);
    ``key``: the append's idempotency key; with ``absent``, in a commit made only while
    none of ``agents`` has events."""
    last: ConflictError | None = None
    for _ in range(_RETRIES):
        try:
            request = await _requests(backend, codec, stream, agents, forgotten)
            if key is not None:
                request = dataclasses.replace(request, idempotency_key=key)
            if absent:
                # (in id order: two imports' checks lock head rows in one order)
                checks = [StreamChange(a, absent=True) for a, _ in sorted(agents)]
                await backend.append_together([request], checks)
            else:
                await backend.append(request)
            return
        except ConflictError as exc:
            if exc.agent_id != stream:
                raise
            last = exc
    assert last is not None
    raise RetriesExhausted(stream, _RETRIES, last)


async def erase(backend: Backend, codec: Codec, agent_id: str) -> bool:
    """The store's delete of ``agent_id`` (conditional within
    :func:`~statekeeper.store.conditional.delete_only_at`) with its tombstone, in one
    commit where the engine has one (see the module documentation)."""
    conditional = expected_head()
    checksum = expected_checksum()  # (the head record's identity, with the head)
    forgotten = forgetting.get()
    if not has_feed(backend):
        from .conditional import erase as erase_only

        return await erase_only(backend, agent_id)
    if not backend.appends_together:  # the tombstone after the delete, through an intent
        from .conditional import delete_at
        from .feed_intents import with_intent

        if conditional is None:
            head = await head_or_lost(backend, agent_id)

            async def delete() -> bool:
                return await backend.delete_agent(agent_id)
        else:
            head = conditional

            async def delete() -> bool:
                return await delete_at(backend, agent_id, conditional, checksum)

        return await with_intent(backend, codec, agent_id, head, forgotten, delete)
    from .feed_intents import settle  # a forget's intent a crash left (feed_intents)

    await settle(backend, codec)
    stream = stream_of(backend, agent_id)
    last: ConflictError | None = None
    for _ in range(_RETRIES):
        try:
            head = conditional if conditional is not None else await backend.head(agent_id)
        except AgentLost:  # (Redis) its keys are gone: the delete acknowledges it
            existed = await backend.delete_agent(agent_id)
            if existed:  # the head it ended at is lost with it: 0
                await record_unless_created(backend, codec, agent_id, 0, forgotten=forgotten)
            return existed
        if head == 0:
            return await backend.delete_agent(agent_id)  # no stream: no tombstone
        request = await _request(backend, codec, stream, agent_id, head, forgotten)
        try:
            change = StreamChange(
                agent_id, delete_at=head, delete_checksum=checksum if conditional else None
            )
            await backend.append_together([request], [change])
            return True
        except ConflictError as exc:
            if exc.agent_id == agent_id and conditional is not None:
                if exc.current_seq == 0:
                    return False  # gone already (as conditional.delete_at)
                raise
            if exc.agent_id not in (agent_id, stream):
                raise
            last = exc  # another tombstone first, or an append of the agent: again
    assert last is not None
    raise RetriesExhausted(agent_id, _RETRIES, last)


async def head_or_lost(backend: Backend, agent_id: str) -> int:
    """The agent's head; 0 for an agent whose stored data the engine lost."""
    try:
        return await backend.head(agent_id)
    except AgentLost:
        return 0


def tombstone_event(record_: FeedRecord, body: dict[str, Any], shard: int) -> FeedEvent:
    """The feed event of a tombstone record whose verified body is ``body``."""
    agent_id = body.get("agent_id")
    head = body.get("head")
    if not isinstance(agent_id, str) or not isinstance(head, int):
        raise IntegrityError(record_.agent_id, record_.event.seq, "not a tombstone")
    within = namespace_of_stream(record_.agent_id)
    if within is not None and namespace_of(agent_id) != within:
        # a role that may write one namespace's stream named another's agent: forged
        raise IntegrityError(
            record_.agent_id,
            record_.event.seq,
            f"a tombstone of {agent_id!r}, outside its stream's namespace {within!r}",
        )
    info = {"forgotten": bool(body.get("forgotten"))}
    event = Event(agent_id, head, AGENT_DELETED, record_.event.timestamp, info)
    return FeedEvent(record_.position, event, shard, deleted=True)


def tombstone_of(
    store: StateStore,
    record_: FeedRecord,
    shard: int,
    event_types: frozenset[str] | None,
    prefixes: tuple[str, ...],
    access: FeedAccess | None,
) -> FeedEvent | None:
    """What a subscription hands out for a tombstone record: its event, or None when
    ``event_types`` does not name :data:`AGENT_DELETED` or the agent is not under every
    one of ``prefixes`` or ``access`` may not read it."""
    if event_types is not None and AGENT_DELETED not in event_types:
        return None
    body, _ = store._open_event(record_.agent_id, record_.event)
    deleted = tombstone_event(record_, body, shard)
    if any(not deleted.agent_id.startswith(p) for p in prefixes):
        return None
    return deleted if access is None or access.readable(deleted.agent_id) else None
