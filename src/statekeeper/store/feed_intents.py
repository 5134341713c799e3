"""A delete's feed tombstone where the engine cannot commit it with the delete (Redis
Cluster, tiered, S3; a governed store's entry-first delete there): an *intent* first,
so a crash between the delete and its tombstone is finished later, never lost.

Before, the tombstone was appended right after the delete: a crash in between left the
delete without it, and every consumer kept the deleted agent for ever. Now:

1. an intent is written: a hidden stream ``"\\x01sk-feed/pending/<token>"`` (never
   delivered by the feed, like every stream of statekeeper's own) holding one sealed
   record: the agent, the head it is deleted at, that head event's checksum;
2. the agent is deleted;
3. the tombstone is appended with the idempotency key ``<token>`` (so it is stored
   once, whoever appends it);
4. the intent is deleted.

:func:`finish_pending` (run by a store's first delete on such an engine;
:meth:`~statekeeper.store.StateStore.verify` of the whole store reports each intent
left, kind ``"feed"``) settles every intent left: when the agent's head event is no
longer the one the intent names the delete happened, and the tombstone is appended (a
duplicate when step 3 had been reached; none when a tombstone of the agent written after
the intent is there: :func:`_announced`) before the intent goes; when it still is, the
intent is dropped only once the process that wrote it (its ``"owner"``) is provably
gone, or is this process with the operation no longer under way
(:func:`~statekeeper.backends.tiered_owner.owner_gone`); otherwise it is left, its
delete may still come (dropped before, a crash of its owner after the delete lost the
tombstone). Steps 3 and 4 are each one write, so a crash anywhere leaves the delete
with its tombstone, or an intent that ends in one.

A delete's tombstone is never appended once its agent has events again (created
anew since the delete, by another process, before the tombstone:
:func:`~.feed_deletes.record_unless_created`): at a position after the new agent's
events, it made every subscriber and projection drop that live agent, no error. Its
intent is left instead (state ``"recreated"`` in ``statekeeper feed-intents``),
named by ``verify``: a read model may keep what it derived from the deleted agent's
events beside the new agent's (rebuild those that count or sum events), and
``settle_intents(..., force=True)`` drops it; a later delete of the agent, whose
tombstone follows, ends it too (:func:`_announced`).

``forget`` (crypto-shredding) takes the same path on every engine with a feed
(:func:`forget_with_intent`): its data key lives outside the engine, so no commit holds
both. Its intent (``"kind": "forget"``) is finished with the forgotten tombstone when
the agent's key is destroyed, and dropped when it is intact and its owner provably gone
(left when this process's keyring has no key vault to tell); the first delete or forget
of a process on an engine settles the intents left (:func:`settle`), ``verify`` names
them.

Under PostgreSQL row-level security a tenant's role may write no stream of the whole
store: a forget's intent there is one of its namespace's (:func:`intent_stream`,
``"\\x01sk-feed/pending/in/<namespace>/<token>"``), which the policy lets the roles
that may write the namespace's agents write and delete (``sql/row_security.sql``). A
role settles the intents it may read and leaves those of namespaces it may not write
(an ``AccessDenied``) to a role that may, and those it cannot settle (one that does not
open, or whose namespace's tombstone stream refuses its tombstone: a role that may write
the namespace wrote them so) for ``verify`` to name: they failed every delete of every
role that may read the namespace, another tenant's and the store admin's. Before, no
intent was written there: a crash between the key's destruction and the tombstone left
the read models holding the forgotten agent for ever. (A schema whose row-level
security an older statekeeper installed, ``intents_by_namespace`` False, goes on without
one until ``enforce_in_postgres`` runs again.)
"""

from __future__ import annotations

import secrets
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ..backends.base import Backend
from ..backends.tiered_owner import IN_FLIGHT, claim_owner, owner_gone
from ..codec import ZERO_LINK, Codec
from ..codec.datakeys import MASTER_KEYED
from ..errors import AccessDenied, ConflictError, IntegrityError, SerializationError, StorageError
from ..namespaces import namespace_of
from ..records import AppendRequest, RawEvent

__all__ = [
    "PENDING",
    "finish_pending",
    "forget_with_intent",
    "intent_stream",
    "sealed_streams",
    "settle",
    "with_intent",
]

T = TypeVar("T")

#: the prefix of every intent stream (sealed with the master key: no data key of its own)
PENDING = MASTER_KEYED
_TYPE = "statekeeper.delete_intent"
_PAGE = 100
#: backends whose intents a delete of this process already settled
_settled: weakref.WeakSet[Backend] = weakref.WeakSet()
#: per backend and agent, the intents left ``recreated`` that this process knows of
_recreated: weakref.WeakKeyDictionary[Backend, dict[str, set[str]]] = weakref.WeakKeyDictionary()


async def with_intent(
    backend: Backend,
    codec: Codec,
    agent_id: str,
    head: int,
    forgotten: bool,
    delete: Callable[[], Awaitable[bool]],
) -> bool:
    """``delete()`` (of ``agent_id``, at ``head``) with its tombstone, through an intent
    (see the module documentation); True if it existed."""
    from .feed_deletes import record_unless_created

    await settle(backend, codec)  # intents a crash left, before this delete's own
    raws = await backend.read(agent_id, head - 1, head) if head else []
    if not raws or raws[-1].seq != head:  # nothing at that head (lost, moved): as before
        existed = await delete()
        if existed:
            await record_unless_created(backend, codec, agent_id, head, forgotten=forgotten)
        return existed
    stream = intent_stream(backend, agent_id)
    token = stream[len(PENDING) :]
    IN_FLIGHT.add(stream.encode())  # (its operation under way: no settle drops it)
    try:
        await _write_intent(backend, codec, stream, agent_id, head, raws[-1], forgotten)
        try:
            existed = await delete()
        except ConflictError:
            await backend.delete_agent(stream)  # nothing was deleted
            raise
        if existed and not await record_unless_created(
            backend, codec, agent_id, head, forgotten=forgotten, key=token
        ):
            _left(backend, agent_id).add(stream)  # created again since: left (_finish)
            return existed
        await backend.delete_agent(stream)
        if existed:  # its tombstone announces those left: ended (was: till a restart)
            await _end_left(backend, codec, agent_id)
    finally:
        IN_FLIGHT.discard(stream.encode())
    return existed


def _left(backend: Backend, agent_id: str) -> set[str]:
    """The intents of ``agent_id`` this process left ``recreated`` (its delete, or its
    settle met one), which a later delete's tombstone announces (:func:`_end_left`)."""
    return _recreated.setdefault(backend, {}).setdefault(agent_id, set())


async def _end_left(backend: Backend, codec: Codec, agent_id: str) -> None:
    """End the intents of ``agent_id`` left ``recreated`` that this process knows of,
    once a delete of the agent appended its tombstone (:func:`_announced`). Before, they
    stayed until another process's first delete settled them: ``verify`` failed on
    each, ``feed-intents`` said its tombstone was due."""
    for stream in sorted(_recreated.get(backend, {}).pop(agent_id, set())):
        body = await _intent(backend, codec, stream)
        if body is not None and not await _finish(backend, codec, stream, body):
            _left(backend, agent_id).add(stream)  # (created again meanwhile: still left)


async def settle(backend: Backend, codec: Codec) -> None:
    """Finish the intents a crash left, once a process per backend (the first delete
    or forget of a store on it, a governed store's too)."""
    if backend not in _settled and (
        # (row-level security an older statekeeper installed: no intent it allows)
        not getattr(backend, "tombstones_by_namespace", False)
        or getattr(backend, "intents_by_namespace", False)
    ):
        # (counted first: a listing from the intents' prefix pages through every agent
        # when there is none, and on Redis raises AgentLost for a lost one — the delete
        # that acknowledges that loss must not)
        if await backend.count_prefix(PENDING):
            await finish_pending(backend, codec)
        _settled.add(backend)


async def forget_with_intent(
    backend: Backend,
    codec: Codec,
    agent_id: str,
    head: int,
    destroy: Callable[[], T],
    purge: Callable[[], Awaitable[bool]],
) -> tuple[T, bool]:
    """``destroy()`` (``forget``'s destruction of ``agent_id``'s data key; its stream
    ends at ``head``) with its forgotten tombstone, through an intent: the key lives
    outside the engine, so no engine commits the two together. Before, the tombstone
    was appended after the key was destroyed: a crash in between left read models
    holding the forgotten agent's derived plaintext for ever. The intent (``"kind":
    "forget"``) is written first; :func:`finish_pending` appends the tombstone of an
    intent whose agent's key is destroyed, and drops one whose key is intact (the
    crash came before the destruction). ``purge()`` runs after the destruction: True
    when it deleted the agent, whose delete wrote the tombstone then (none more)."""
    from .feed_deletes import has_feed, record

    raws = await backend.read(agent_id, head - 1, head) if head else []
    if (
        not has_feed(backend)
        or not raws
        or raws[-1].seq != head
        or (  # row-level security an older statekeeper installed: no intent it allows
            getattr(backend, "tombstones_by_namespace", False)
            and not getattr(backend, "intents_by_namespace", False)
        )
    ):
        out = destroy()
        purged = await purge()
        if head and not purged and has_feed(backend):
            await record(backend, codec, agent_id, head, forgotten=True)
        return out, purged
    await settle(backend, codec)  # intents a crash left, before this one's own
    stream = intent_stream(backend, agent_id)
    token = stream[len(PENDING) :]
    IN_FLIGHT.add(stream.encode())  # (its operation under way: no settle drops it)
    try:
        await _write_intent(backend, codec, stream, agent_id, head, raws[-1], True, what="forget")
        try:
            out = destroy()
        except Exception:
            await backend.delete_agent(stream)  # nothing was destroyed
            raise
        purged = await purge()
        if not purged:
            await record(backend, codec, agent_id, head, forgotten=True, key=token)
        await backend.delete_agent(stream)
    finally:
        IN_FLIGHT.discard(stream.encode())
    return out, purged


def intent_stream(backend: Backend, agent_id: str) -> str:
    """A new intent stream for a delete or forget of ``agent_id``: ``PENDING`` and a
    random token; under row-level security (``intents_by_namespace``) one of the
    agent's namespace, ``PENDING + "in/<namespace>/<token>"`` (the part after ``in/``
    has that namespace: the policy matches its grants against it). The part after
    ``PENDING`` is the idempotency key of the tombstone it ends in."""
    token = secrets.token_hex(16)
    if getattr(backend, "intents_by_namespace", False):
        return f"{PENDING}in/{namespace_of(agent_id)}/{token}"
    return PENDING + token


async def _write_intent(
    backend: Backend,
    codec: Codec,
    stream: str,
    agent_id: str,
    head: int,
    at: RawEvent,
    forgotten: bool,
    *,
    what: str | None = None,
) -> None:
    """The intent ``stream`` for ``agent_id`` at ``head`` (whose event is ``at``),
    written; a delete's intent has no ``"kind"`` (as every earlier version wrote it), a
    forget's is ``"forget"``. It names its ``"owner"``, this process
    (:func:`~statekeeper.backends.tiered_owner.claim_owner`): no settle drops it while
    that process may still go on with it (:func:`_finish`)."""
    from .feed_deletes import stream_of

    body: dict[str, Any] = {
        "agent_id": agent_id,
        "head": head,
        "checksum": at.checksum.hex(),
        "forgotten": forgotten,
        "owner": claim_owner(),
        # the head of the agent's tombstone stream, read after its head event: a
        # tombstone of the agent past it announced the delete (:func:`_announced`)
        "after": await backend.head(stream_of(backend, agent_id)),
    }
    if what is not None:
        body["kind"] = what
    ts = time.time()
    sealed = codec.encode(stream, 1, _TYPE, ts, body, ZERO_LINK)
    raw = RawEvent(1, _TYPE, ts, sealed.payload, sealed.checksum)
    await backend.append(
        AppendRequest(stream, 0, [raw], head_tag=codec.head_tag(stream, 1, sealed.link))
    )


def _key_destroyed(codec: Codec, agent_id: str) -> bool | None:
    """Whether ``agent_id``'s data key is destroyed (a tombstone in the key vault); None
    when this process cannot tell (its keyring has no key vault: a delete job opened
    with the master key alone). Such a process took every key for intact before, and
    dropped the intent of a forget whose key was gone: its tombstone was never written."""
    keyring = codec.keyring
    if keyring is None or keyring.data_keys is None:
        return None
    return keyring.forgotten_in(codec.key_family, agent_id) is not None


async def finish_pending(backend: Backend, codec: Codec) -> list[str]:
    """Settle every intent left by a delete a crash stopped (see the module
    documentation); returns the agents whose tombstone it appended (or found in the
    feed already, written after the intent: :func:`_announced`)."""
    from .keyguard import key_family

    finished: list[str] = []

    await key_family(backend, codec)  # (whose tombstones count: _key_destroyed)
    async for stream in _streams(backend):
        try:
            body = await _intent(backend, codec, stream)
        except (IntegrityError, SerializationError):
            # one that does not open (damaged, altered; under row-level security a
            # role that may write its namespace wrote it so) is left, for ``verify``
            # to name; raised outside row-level security, it failed every delete and
            # forget of the store, on every engine, and the whole store's verify
            continue
        try:
            if await _finish(backend, codec, stream, body):
                finished.append(body["agent_id"] if body is not None else stream)
        except (AccessDenied, StorageError):
            # under row-level security: an intent of a namespace this role may read
            # but not write, left to a role that may (nothing of it was written); or
            # one whose namespace's tombstones do not take an append: a role that may
            # write that namespace wrote it so, and it fails no delete of another's
            # (``verify`` names it)
            if not getattr(backend, "intents_by_namespace", False):
                raise
    return finished


async def _finish(
    backend: Backend,
    codec: Codec,
    stream: str,
    body: dict[str, Any] | None,
    *,
    abandoned: bool = False,
) -> bool:
    """Settle the intent ``stream`` (holding ``body``); True when it appended the
    tombstone (or found one of its agent written after it). Decided only when its
    operation is provably over (the agent deleted, its key destroyed: the tombstone,
    unless one is in the feed already: :func:`_announced`) or provably dead (neither,
    and its owner is gone: :func:`~statekeeper.backends.tiered_owner.owner_gone`, this
    process's when it is no longer under way: dropped). An intent whose owner may
    still go on with it is left: dropped before, by another process's first delete,
    between its write and the delete (or the key's destruction), a crash of its owner
    after that step lost the tombstone (read models kept the agent, ``verify`` found
    nothing). One of an earlier version (no owner) or of another host is never proven
    dead: left while its agent is intact (``verify`` names it) — unless ``abandoned``
    (an operator settles it: :mod:`.feed_intent_repair`), which takes its owner for
    gone. A delete's intent whose agent has events again (created anew since its
    delete) is left, its tombstone not appended (False; see the module
    documentation)."""
    from .feed_deletes import record, record_unless_created

    if body is None:  # not one a delete wrote
        await backend.delete_agent(stream)
        return False
    agent_id, head = body["agent_id"], body["head"]
    forgotten = bool(body.get("forgotten"))
    if body.get("kind") == "forget":  # (forget_with_intent)
        done = _key_destroyed(codec, agent_id)
        if done is None:  # no key vault here: left to a process with one
            return False
    else:
        raws = await backend.read(agent_id, head - 1, head)
        still = bool(raws) and raws[-1].seq == head
        # deleted: the head event it named is gone
        done = not (still and raws[-1].checksum.hex() == body["checksum"])
    if done and await _announced(backend, codec, stream, body):
        pass  # its tombstone (or a later delete's) is in the feed: none more (see there)
    elif done and body.get("kind") == "forget":  # (the agent kept: its key destroyed)
        key = stream[len(PENDING) :]
        await record(backend, codec, agent_id, head, forgotten=forgotten, key=key)
    elif done:  # its tombstone, once (the idempotency key: whoever appends it)
        key = stream[len(PENDING) :]
        if not await record_unless_created(
            backend, codec, agent_id, head, forgotten=forgotten, key=key
        ):
            _left(backend, agent_id).add(stream)
            return False  # created again since: left, none appended (see above)
    elif not abandoned and not owner_gone(body.get("owner"), stream.encode()):
        return False  # its owner may still delete the agent (destroy the key): left
    await backend.delete_agent(stream)
    return done


async def _announced(backend: Backend, codec: Codec, stream: str, body: dict[str, Any]) -> bool:
    """Is there a tombstone of the intent's agent written after the intent (past its
    ``"after"``; an intent of an earlier version has none: one stamped no earlier)?
    Then the agent's deletion (or a later one's) is announced already, and the
    intent's own tombstone, appended now, would come after whatever was written to an
    agent of that id since: an intent left while its agent was intact (its owner not
    provably gone), the agent deleted by another process with its own tombstone and
    created again, the next settle appended the old delete's tombstone after the new
    agent's events, and every read model dropped the live agent."""
    from .feed_deletes import stream_of

    tombstones = stream_of(backend, body["agent_id"])
    after = body.get("after")
    since: float | None = None
    if type(after) is not int:
        raws = await backend.read(stream, 0, 1)
        since, after = (raws[0].timestamp if raws else 0.0), 0
    while True:
        page = await backend.read(tombstones, after, limit=_PAGE)
        for raw in page:
            if since is not None and raw.timestamp < since:
                continue
            try:
                found, _ = codec.decode(
                    tombstones, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                )
            except (IntegrityError, SerializationError):  # (verify names it: feed_verify)
                continue
            if isinstance(found, dict) and found.get("agent_id") == body["agent_id"]:
                return True
        if len(page) < _PAGE:
            return False
        after = page[-1].seq


async def _streams(backend: Backend) -> AsyncIterator[str]:
    """Every intent stream, a page at a time."""
    after = PENDING
    while True:
        page = await backend.list_agents(after=after, limit=_PAGE)
        streams = [info.agent_id for info in page if info.agent_id.startswith(PENDING)]
        for stream in streams:
            yield stream
        if len(streams) < len(page) or len(page) < _PAGE:
            return
        after = page[-1].agent_id


async def _intent(backend: Backend, codec: Codec, stream: str) -> dict[str, Any] | None:
    """The intent ``stream`` holds (None: none, or not one a delete wrote; nor one of a
    namespace's stream naming an agent outside it: a role that may write one namespace
    forged it, and settling it would tell every consumer another tenant's agent was
    deleted). One whose read fails and whose stream is gone was ended meanwhile (by its
    owner, or a settle): None — S3 lists a stream's commit objects, then fetches them,
    and one deleted in between raised IntegrityError, which was named a damaged intent
    (``"unopened"``: ``verify`` failed, ``feed-intents`` listed it) for one already
    gone."""
    try:
        raws = await backend.read(stream, 0, 1)
        if not raws:
            return None
        raw = raws[0]
        body, _ = codec.decode(stream, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum)
    except (IntegrityError, SerializationError):
        if await _ended(backend, stream):
            return None
        raise
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("agent_id"), str)
        or type(body.get("head")) is not int
        or not isinstance(body.get("checksum"), str)
    ):
        return None
    within = stream[len(PENDING) :]
    if within.startswith("in/") and namespace_of(body["agent_id"]) != namespace_of(within[3:]):
        return None
    return body


async def _ended(backend: Backend, stream: str) -> bool:
    """Is ``stream`` gone (no head)? False when that cannot be read either."""
    try:
        return not await backend.head(stream)
    except StorageError:
        return False


async def sealed_streams(backend: Backend) -> list[str]:
    """The feed's own streams the store holds, sealed like an agent's: its tombstone
    streams (one per shard, or per namespace under row-level security) and the intents
    a crash left. ``rekey`` re-encrypts them and ``keys status`` counts them: left under
    a retired key, the feed and a restore failed on the first tombstone
    (``KeyNotFound``)."""
    from .feed_deletes import PREFIX_IN, streams

    found = [s for s in streams(backend) if await backend.head(s)]
    for prefix in (PREFIX_IN, PENDING):
        if not await backend.count_prefix(prefix):  # (see settle: an empty listing pages all)
            continue
        after = prefix
        while True:
            page = await backend.list_agents(after=after, limit=_PAGE)
            found.extend(i.agent_id for i in page if i.agent_id.startswith(prefix))
            if not page or not page[-1].agent_id.startswith(prefix) or len(page) < _PAGE:
                break
            after = page[-1].agent_id
    return found
