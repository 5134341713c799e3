"""Migration by rewrite: an agent's head record brought to a schema version in place,
with :meth:`~statekeeper.backends.base.Backend.rewrite` — the compare-and-set rewrite
``statekeeper rekey`` uses — its pre-migration bytes kept inside it until finalize.

What is rewritten, and why the head *event* (not only a snapshot). The stored state of
an agent at head ``H`` is the event at ``H`` (its ``ops`` take the state at ``H - 1`` to
the state at ``H``, its ``v`` is the schema version) and, when there is one, the
snapshot at ``H``. A migration rewrites both: the event keeps its type, timestamp, info,
machine state, actor and idempotency key; its ``ops`` gain the upcast (original ops, then
the diff from the old document to the new one) and its ``v`` becomes the target, so
the fold of the stream gives the migrated state; a snapshot at ``H`` is re-written whole
at the target version. Rewriting only a snapshot would keep the event's checksum and
the head tag (a tag commits to the chain link, which commits to the event bytes): a
writer or reader holding the pre-migration state at ``H`` in its cache would not see
the migration (``ReadPath.refresh`` compares the checksum at the cached seq, appends
compare the tag) and would append ops computed against the old document onto the
migrated one. Rewriting the event changes its link, hence the head tag: every stale
cache fails its compare-and-set and folds again. Older records (history) are not
touched; ``history(at_seq=H-1)`` still folds the old version.

The pre-migration bytes (the event's payload and checksum, the snapshot at ``H`` and the
head tag) are kept in the rewritten event under the reserved body key :data:`PRE`,
written in the same atomic rewrite — no side file to lose, no window where a crash
leaves an agent migrated without its way back. :func:`original` reads them,
:func:`restore_request` puts them back byte for byte (rollback), :func:`strip_request`
drops them (finalize). A stream the rewrite cannot take (records from before chain
links, a head without tag, a head that is a retention base snapshot with no event) is
migrated by an appended ``schema.migrate`` event instead (see :mod:`.migrate`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .. import patch
from ..codec import Codec
from ..codec.formats import JSON
from ..codec.pipeline import ZERO_LINK
from ..codec.types import needs_tagging
from ..errors import AgentForgotten
from ..records import EventType, RawEvent, RawSnapshot, RewriteRequest, Snapshot
from ..security.rekey_checks import sealed_now

if TYPE_CHECKING:
    from ..store.store import StateStore
    from .registry import ModelSchema

__all__ = [
    "PRE",
    "Head",
    "Original",
    "Rewrite",
    "collection_paused",
    "kept_in",
    "migrate_request",
    "original",
    "original_body",
    "read_heads",
    "read_page",
    "restore_request",
    "shown",
    "states_of",
    "stored",
    "strip_request",
]

_orjson_dumps = orjson.dumps

#: the reserved event body key holding a rewritten event's pre-migration bytes
PRE = "schema.pre"
_SNAPSHOT = "snapshot"


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _raw(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass(frozen=True, slots=True)
class Head:
    """An agent's head records as stored: the head seq and tag, the event at the head
    (None: the head is a base snapshot without its event) and the snapshot at the head."""

    seq: int
    tag: bytes | None
    event: RawEvent | None
    snapshot: RawSnapshot | None


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A rewrite to apply, and the chain link its head event will have (what the
    store's witness must note once it is applied)."""

    request: RewriteRequest
    link: bytes


@dataclass(frozen=True, slots=True)
class Original:
    """The pre-migration records of an agent, kept in its migrated event: the event at
    ``seq`` and the snapshot at ``seq`` (if any) as they were stored, the head tag, the
    schema version, and the id of the run that rewrote them."""

    run: str
    seq: int
    version: int
    event: RawEvent
    snapshot: RawSnapshot | None
    tag: bytes | None


def stored(store: StateStore, agent_ids: Sequence[str]) -> list[str]:
    """The stored ids of ``agent_ids`` as ``store`` names them: in a store opened in a
    namespace they are relative, while the records read and rewritten here (backend
    calls, the codec's links and checksums) name the full id. Unchanged elsewhere."""
    from ..store.namespaced import NamespacedStateStore

    if isinstance(store, NamespacedStateStore):
        return [store.qualify(a) for a in agent_ids]
    return list(agent_ids)


def shown(store: StateStore, stored_id: str) -> str:
    """The id ``store`` names the agent stored as ``stored_id`` by (see :func:`stored`)."""
    from ..store.namespaced import NamespacedStateStore

    return store.relative(stored_id) if isinstance(store, NamespacedStateStore) else stored_id


async def read_heads(store: StateStore, agent_ids: Sequence[str]) -> list[Head | None]:
    """The head records of each agent (None: no stream; ``agent_ids``: stored ids,
    :func:`stored`), in a few reads per page:
    :meth:`Backend.read_latest_many` (one consistent read on SQLite and PostgreSQL),
    then :meth:`Backend.read_heads` for the agents whose latest snapshot is at the head
    (the read of latest state then holds no event)."""
    return [head for head, _ in await read_page(store, agent_ids, states=False)]


async def read_page(
    store: StateStore, agent_ids: Sequence[str], *, states: bool = True
) -> list[tuple[Head | None, Snapshot | None]]:
    """:func:`read_heads` and, with ``states``, each agent's latest state folded from
    the same read (verified as every load is: records, chain and head tag) — one
    consistent read of the page instead of two (the store's own read path folds it;
    a store without one reads the states with :meth:`StateStore.get_many`).
    ``agent_ids`` are stored ids (:func:`stored`): so are those of the states."""
    backend = store.backend
    from ..store.keyguard import key_family

    # before a rewrite is sealed from what is read here (past the store's first-use
    # gate): its data keys are the store's family's, never a legacy key of the id alone
    await key_family(backend, store.codec)
    reads = await backend.read_latest_many(agent_ids)
    heads: list[Head | None] = []
    missing: list[int] = []
    for i, read in enumerate(reads):
        if read is None:
            heads.append(None)
            continue
        event = read.events[-1] if read.events and read.events[-1].seq == read.head else None
        snap = read.snapshot
        if snap is not None and snap.seq != read.head:
            snap = None
        if event is None:
            missing.append(i)
        heads.append(Head(read.head, read.tag, event, snap))
    if missing:
        found = await backend.read_heads([agent_ids[i] for i in missing])
        for i, event in zip(missing, found, strict=True):
            head = heads[i]
            assert head is not None
            if event is not None and event.seq == head.seq:
                heads[i] = Head(head.seq, head.tag, event, head.snapshot)
    folded: list[Snapshot | None] = [None] * len(agent_ids)
    path: Any = getattr(store, "_reads", None)
    if states and path is None:
        folded = await states_of(store, agent_ids)
    elif states:
        # (the folds of what was read suspend only to read more of a long stream)
        with collection_paused():
            for i, (agent_id, read) in enumerate(zip(agent_ids, reads, strict=True)):
                if read is not None:
                    with contextlib.suppress(AgentForgotten):  # no state: None
                        folded[i] = path.public(await path.fold_latest(agent_id, read))
    return list(zip(heads, folded, strict=True))


async def states_of(store: StateStore, agent_ids: Sequence[str]) -> list[Snapshot | None]:
    """:meth:`StateStore.get_many`, with None for an agent ``forget`` crypto-shredded
    (it has no state to migrate, roll back or expire: one such agent failed the whole
    pass over the store with ``AgentForgotten``)."""
    try:
        return list(await store.get_many(agent_ids))
    except AgentForgotten:
        out: list[Snapshot | None] = []
        for agent_id in agent_ids:
            try:
                out.append(await store.get(agent_id))
            except AgentForgotten:
                out.append(None)
        return out


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around a synchronous page of work (it
    allocates a few dozen containers per agent, each allocation burst triggering
    collections that walk every tracked object of the process). Measured: 10-15 % of
    a migration's CPU on SQLite (``benchmarks/bench_schema.py``, 10k agents). The
    previous state is restored (an application that disabled it keeps it disabled);
    the objects made meanwhile are collected by the next collection as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _open_body(codec: Codec, agent_id: str, raw: RawEvent) -> tuple[dict[str, Any], bytes | None]:
    body, prev, _ = _open_plain(codec, agent_id, raw)
    return body, prev


def _open_plain(
    codec: Codec, agent_id: str, raw: RawEvent
) -> tuple[dict[str, Any], bytes | None, bool]:
    """The event's body and previous link, verified, and whether the body is plain JSON
    in the JSON format (no tagged value: it serializes again as it decoded)."""
    opened = codec.open(agent_id, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum)
    if opened.version == 0:
        return {}, None, False
    body = codec.deserialize(opened.body, agent_id, raw.seq, fmt=opened.format)
    plain = opened.format == JSON and b'"$t"' not in opened.body
    return body, opened.prev, plain


def _reseal(
    codec: Codec,
    agent_id: str,
    head: Head,
    body: dict[str, Any],
    prev: bytes,
    snapshot_body: dict[str, Any] | None,
    plain: bool = False,
) -> Rewrite:
    """The rewrite of ``head``'s event to ``body`` (and its snapshot to
    ``snapshot_body``), the head tag following the event's new link. ``plain``: the
    body is known to be plain JSON (and the codec writes JSON), so it is dumped
    without the codec's walk over it, to the same bytes (that walk only decides that a
    plain document is dumped as is)."""
    raw = head.event
    assert raw is not None
    data = _orjson_dumps(body) if plain else codec.serialize(body, "event")
    sealed = codec.seal(agent_id, raw.seq, raw.type, raw.timestamp, data, prev)
    snaps: tuple[RawSnapshot, ...] = ()
    if head.snapshot is not None and snapshot_body is not None:
        snap = codec.seal(
            agent_id,
            head.seq,
            _SNAPSHOT,
            head.snapshot.timestamp,
            codec.serialize(snapshot_body, "state"),
            sealed.link,
        )
        snaps = (RawSnapshot(head.seq, head.snapshot.timestamp, snap.payload, snap.checksum),)
    event = RawEvent(raw.seq, raw.type, raw.timestamp, sealed.payload, sealed.checksum)
    tag = codec.head_tag(agent_id, head.seq, sealed.link)
    return Rewrite(RewriteRequest(agent_id, head.seq, head.tag, (event,), snaps, tag), sealed.link)


def migrate_request(
    codec: Codec,
    head: Head,
    state: Snapshot,
    new: dict[str, Any],
    target: int,
    run_id: str,
    fsm: str | None = None,
    schema: ModelSchema[Any] | None = None,
) -> Rewrite | None:
    """The rewrite that brings ``state`` (folded at ``head``) to ``new`` at version
    ``target``, keeping the pre-migration bytes under :data:`PRE`; None when the stream
    cannot be rewritten (see the module docs) or ``state`` is not the one at ``head``.
    ``fsm``: the machine state's name at ``target`` when a rename changed it (recorded
    in the event and the snapshot: read at ``target``, the old name would not be).
    ``schema``: the head event's names are brought to ``target`` too — a transition's
    event and states renamed in the body; a custom event whose type or info the casters
    change up to ``target`` cannot be (its type is the record's): None."""
    agent_id = state.agent_id
    raw = head.event
    if raw is None or head.tag is None or state.seq != head.seq:
        return None
    if head.snapshot is not None and head.snapshot.seq != head.seq:
        return None
    body, prev, plain = _open_plain(codec, agent_id, raw)
    if prev is None:
        return None  # a record from before chain links: its link cannot be re-made
    pre: dict[str, Any] = {
        "run": run_id,
        "v": state.schema_version,
        "event": _b64(raw.payload),
        "sum": _b64(raw.checksum),
        "tag": _b64(head.tag),
    }
    if head.snapshot is not None:
        s = head.snapshot
        pre["snap"] = [s.timestamp, _b64(s.payload), _b64(s.checksum)]
    rewritten = dict(body)
    rewritten.pop(PRE, None)  # an earlier run's: it lives on inside pre["event"]
    if schema is not None and not _renamed(
        schema, raw.type, rewritten, state.schema_version, target
    ):
        return None
    upcast = patch.diff(state.data, new)
    # plain: the original body decoded from plain JSON, the pre-migration bytes are
    # base64 strings, so only the upcast can hold a value the codec must tag
    plain = plain and codec.format.id == JSON and not needs_tagging(upcast)
    ops = list(body.get("ops") or []) + upcast
    if ops:
        rewritten["ops"] = ops
    rewritten["v"] = target
    rewritten[PRE] = pre
    if fsm is not None and fsm != state.fsm_state:
        rewritten["fsm"] = fsm
    whole = {
        "fsm": fsm if fsm is not None else state.fsm_state,
        "v": target,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "entered": state.state_entered_at,
        "data": new,
    }
    return _reseal(codec, agent_id, head, rewritten, prev, whole, plain)


def _renamed(
    schema: ModelSchema[Any], event_type: str, body: dict[str, Any], version: int, target: int
) -> bool:
    """Bring ``body`` (an event of ``event_type`` recorded at ``version``) to the names
    of version ``target``, as typed history reads an event of that version (see
    :func:`.events.upcast_event`); False when that cannot be done in the body."""
    if event_type == EventType.TRANSITION:
        if isinstance(body.get("event"), str):
            body["event"] = schema.event_name(body["event"], version, target)
        for key in ("from", "to"):
            if isinstance(body.get(key), str):
                body[key] = schema.state_name(body[key], version, target)
        return True
    if event_type in (EventType.CREATED, EventType.PATCH, EventType.STEP):
        return True
    for step in range(version, target):  # a custom event: cast or renamed?
        if (event_type, step) in schema.event_upcasters:
            return False
        if schema.event_renames.get(step, {}).get(event_type, event_type) != event_type:
            return False
    return True


def kept_in(codec: Codec, agent_id: str, raw: RawEvent) -> Original | None:
    """The pre-migration records the event ``raw`` keeps (None: it keeps none)."""
    body, _ = _open_body(codec, agent_id, raw)
    pre = body.get(PRE)
    if not isinstance(pre, dict):
        return None
    snap = pre.get("snap")
    return Original(
        run=str(pre["run"]),
        seq=raw.seq,
        version=int(pre["v"]),
        event=RawEvent(raw.seq, raw.type, raw.timestamp, _raw(pre["event"]), _raw(pre["sum"])),
        snapshot=None
        if snap is None
        else RawSnapshot(raw.seq, float(snap[0]), _raw(snap[1]), _raw(snap[2])),
        tag=_raw(pre["tag"]),
    )


def kept_key_ids(codec: Codec, agent_id: str, raw: RawEvent) -> list[str | None]:
    """The key ids (None: in the clear) the pre-migration records kept in ``raw``
    are sealed with, read from their clear headers: a rollback needs those keys
    (``keys status`` counts them). Empty when ``raw`` keeps none."""
    kept = kept_in(codec, agent_id, raw)
    if kept is None:
        return []
    payloads = [kept.event.payload]
    if kept.snapshot is not None:
        payloads.append(kept.snapshot.payload)
    headers = [Codec.header(payload) for payload in payloads]
    return [h.key_id if h is not None else "(unreadable)" for h in headers]


async def original(
    store: StateStore, agent_id: str, run_id: str | None = None, *, window: int = 64
) -> Original | None:
    """The pre-migration records a migration rewrote in ``agent_id``'s stream (of run
    ``run_id``, or the latest run), searched from the head back; None when none is
    kept (never migrated by rewrite, or finalized)."""
    backend, codec = store.backend, store.codec
    head = await backend.head(agent_id)
    top = head
    while top > 0:
        start = max(0, top - window)
        rows = await backend.read(agent_id, start, top)
        for raw in reversed(rows):
            found = kept_in(codec, agent_id, raw)
            if found is not None and (run_id is None or found.run == run_id):
                return found
        top, window = start, window * 4
    return None


def restore_request(codec: Codec, head: Head, agent_id: str, kept: Original) -> Rewrite | None:
    """The rewrite that puts ``kept`` back byte for byte (rollback) when the migrated
    event is still the head; None otherwise (written since, or a snapshot was taken at
    the head after the migration where there was none before)."""
    if head.event is None or head.seq != kept.seq:
        return None
    if head.snapshot is not None and kept.snapshot is None:
        return None  # a snapshot taken since: a rewrite cannot remove it
    event, snapshot, tag, link = _sealed_now(codec, agent_id, kept)
    snaps = () if snapshot is None else (snapshot,)
    return Rewrite(RewriteRequest(agent_id, head.seq, head.tag, (event,), snaps, tag), link)


def _sealed_now(
    codec: Codec, agent_id: str, kept: Original
) -> tuple[RawEvent, RawSnapshot | None, bytes | None, bytes]:
    """``kept``'s event, snapshot and head tag as ``codec`` seals them now, and the
    event's link. They were kept as stored when the migration ran: in the clear, or
    under the key active then. ``statekeeper rekey`` since re-encrypted the event that
    holds them, not them — put back as they are, they would be records in the clear in
    an encrypted store (which refuses them) or records under a key rotation retired.
    Such records are re-sealed under the active key: the same content, format, chain
    link and place, as ``rekey`` re-seals (the bytes are authentic: they were read out
    of the verified event that kept them)."""
    e, s = kept.event, kept.snapshot
    reader = codec.migrating()  # (opens kept records written without a key)
    opened = reader.open(agent_id, e.seq, e.type, e.timestamp, e.payload, e.checksum)
    keyring = codec.keyring
    if keyring is None or sealed_now(opened, e.payload, keyring.active_id, _own_keys(codec)):
        return e, s, kept.tag, opened.link
    sealed = codec.seal(
        agent_id,
        e.seq,
        e.type,
        e.timestamp,
        opened.body,
        opened.prev or ZERO_LINK,
        fmt=opened.format,
        legacy_link=opened.prev is None,
        algorithm=opened.algorithm,
    )
    event = RawEvent(e.seq, e.type, e.timestamp, sealed.payload, sealed.checksum)
    snapshot = None
    if s is not None:
        snap = reader.open(agent_id, s.seq, _SNAPSHOT, s.timestamp, s.payload, s.checksum)
        resealed = codec.seal(
            agent_id,
            s.seq,
            _SNAPSHOT,
            s.timestamp,
            snap.body,
            opened.link,  # a snapshot carries the link of the event at its seq
            fmt=snap.format,
            algorithm=snap.algorithm,
        )
        snapshot = RawSnapshot(s.seq, s.timestamp, resealed.payload, resealed.checksum)
    return event, snapshot, codec.head_tag(agent_id, e.seq, sealed.link), sealed.link


def _own_keys(codec: Codec) -> bool:
    """Whether ``codec`` seals each agent's records with its own data key (a vault)."""
    return codec.keyring is not None and codec.keyring.data_keys is not None


def strip_request(codec: Codec, agent_id: str, head: Head, run_id: str) -> Rewrite | None:
    """The rewrite that drops the pre-migration bytes of run ``run_id`` from the head
    event (finalize); None when the head event does not hold them."""
    if head.event is None or head.tag is None:
        return None
    body, prev = _open_body(codec, agent_id, head.event)
    pre = body.get(PRE)
    if prev is None or not isinstance(pre, dict) or pre.get("run") != run_id:
        return None
    del body[PRE]
    snapshot_body = None
    if head.snapshot is not None:
        s = head.snapshot
        opened = codec.open(agent_id, s.seq, _SNAPSHOT, s.timestamp, s.payload, s.checksum)
        snapshot_body = codec.deserialize(opened.body, agent_id, s.seq, fmt=opened.format)
    return _reseal(codec, agent_id, head, body, prev, snapshot_body)


def original_body(codec: Codec, agent_id: str, kept: Original) -> dict[str, Any]:
    """The decoded body of the pre-migration event ``kept`` holds (kept as stored: in
    the clear when the store was encrypted since, see :func:`_sealed_now`)."""
    body, _ = _open_body(codec.migrating(), agent_id, kept.event)
    return body
