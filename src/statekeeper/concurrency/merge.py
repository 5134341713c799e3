"""Conflict resolution: merge two concurrent versions of an agent's data.

Optimistic locking and leases *prevent* concurrent writes to one stream. Sometimes they
happen anyway, by design: an offline copy of an agent edited on a laptop, two regions
each accepting writes, a long-running branch merged back. This module reconciles such
versions; nothing here ever silently drops one of them.

A :class:`Version` is a data document plus, optionally, its causal history (a
:class:`~.vclock.VectorClock`) and the :class:`~.clock.Timestamp` of its last write.
:meth:`Merger.merge` then:

1. **Vector clocks** (when both versions have one): if one history includes the other,
   the newer version is the result — no field-level merge, nothing to resolve.
2. **Application merge** (``Merger(document=fn)``): when given, ``fn(base, ours,
   theirs)`` builds the merged document itself.
3. **Three-way merge per field** (top-level keys): a field changed on one side only
   takes that change; a field changed identically on both sides is kept; a field
   changed differently on both sides goes to the field's strategy — ``fields={name:
   strategy}``, else the ``default`` strategy:

   * :class:`LastWriteWins` — the version with the greater hybrid-logical-clock stamp
     wins (see :mod:`statekeeper.concurrency.clock` for why a plain wall clock is not
     enough);
   * :class:`CRDTs` — both values are CRDTs (:mod:`~.crdt`): their merge;
   * :class:`Custom` — your function of ``(base, ours, theirs)``;
   * :class:`Nested` — a three-way merge of a sub-document with its own strategies;
   * :class:`Manual` (the default) — never decides.

4. Fields no strategy resolved raise :class:`~statekeeper.errors.MergeConflict`,
   carrying both versions (and the base) and naming the fields.

Strategies are chosen *per field* (``fields=``) and *per agent type*
(:class:`MergePolicies`). :func:`merge_into` applies a merge to a stored agent: the base
is read from the agent's own history, the result is written with optimistic locking.

>>> from statekeeper.concurrency.crdt import GCounter
>>> base = Version({"title": "draft", "views": GCounter().to_json()})
>>> ours = Version({"title": "Report", "views": GCounter({"laptop": 3}).to_json()})
>>> theirs = Version({"title": "draft", "views": GCounter({"server": 2}).to_json()})
>>> merged = Merger(fields={"views": CRDTs()}).merge(ours, theirs, base)
>>> merged.data["title"], GCounter.from_json(merged.data["views"]).value
('Report', 5)
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from ..errors import (
    AgentReplaced,
    ConfigurationError,
    FutureStampRefused,
    InvalidArgument,
    MergeConflict,
    StatekeeperError,
)
from ..store.writes import SEEN, Seen
from .clock import Timestamp
from .crdt import find_non_finite, from_json, is_crdt
from .retry import DEFAULT_BUDGET, Backoff, _Budget, retry_loop
from .vclock import Ordering, VectorClock

if TYPE_CHECKING:
    from ..store.store import Leased, StateStore

__all__ = [
    "META_KEY",
    "MISSING",
    "CRDTs",
    "Custom",
    "LastWriteWins",
    "Manual",
    "MergeContext",
    "MergePolicies",
    "Merged",
    "Merger",
    "Nested",
    "Strategy",
    "Unresolved",
    "Version",
    "merge_into",
]

#: where :meth:`Version.document` keeps the clock and stamp inside agent data
META_KEY: Final = "_sync"


class _Missing:
    """A field absent from a version."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: stands for a field that a version does not have (e.g. deleted on one side)
MISSING: Final = _Missing()


class Unresolved(StatekeeperError):
    """Raised by a strategy that cannot decide a field; the merge then reports the
    field in :class:`~statekeeper.errors.MergeConflict`."""


def _same(a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING:
        return a is b
    return _canon(a) == _canon(b)


def _canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _copy(value: Any) -> Any:
    if value is MISSING:
        return value
    out = orjson.dumps(value)
    if b"null" in out and (bad := find_non_finite(value)) is not None:
        # (orjson writes it as null: the merged data would hold None in its place)
        raise ConfigurationError(f"agent data holds JSON values, not the float {bad!r}")
    return orjson.loads(out)


@dataclass(frozen=True)
class Version:
    """One version of an agent's data, with its causal history and last-write stamp.

    Store ``clock`` and ``stamp`` with the data (:meth:`document` puts them under
    :data:`META_KEY`) so that a later merge can use them; :meth:`of` reads them back.
    """

    data: dict[str, Any]
    clock: VectorClock | None = None
    stamp: Timestamp | None = None

    @classmethod
    def of(cls, document: Mapping[str, Any], meta_key: str = META_KEY) -> Version:
        """Split a stored document into data and its ``meta_key`` metadata."""
        data = dict(document)
        meta = data.pop(meta_key, None) or {}
        if not isinstance(meta, dict):
            raise ConfigurationError(f"{meta_key!r} must be an object, not {meta!r}")
        clock = VectorClock.from_json(meta["vc"]) if "vc" in meta else None
        stamp = Timestamp.from_json(meta["ts"]) if "ts" in meta else None
        return cls(data, clock, stamp)

    def document(self, meta_key: str = META_KEY) -> dict[str, Any]:
        """The data with clock and stamp stored under ``meta_key`` (when present)."""
        out = dict(self.data)
        meta: dict[str, Any] = {}
        if self.clock is not None:
            meta["vc"] = self.clock.to_json()
        if self.stamp is not None:
            meta["ts"] = self.stamp.to_json()
        if meta:
            out[meta_key] = meta
        return out

    def edited(self, data: Mapping[str, Any], node: str, stamp: Timestamp | None = None) -> Version:
        """The version after ``node``'s edit (its counter incremented) at ``stamp`` (from
        its :class:`~.clock.HybridClock`), or just after this one's if that is behind."""
        clock, last = (self.clock or VectorClock()).increment(node), self.stamp
        if stamp is not None and last is not None and stamp <= last:
            stamp = Timestamp(last.wall, last.logical + 1, stamp.node)
        return Version(dict(data), clock, stamp if stamp is not None else last)


@dataclass(frozen=True)
class MergeContext:
    """What a strategy may look at besides the field's three values."""

    ours: Version
    theirs: Version
    base: Version | None
    agent_id: str | None
    path: str


class Strategy(abc.ABC):
    """Decides one field both sides changed differently (or raises :class:`Unresolved`).

    ``base``, ``ours`` and ``theirs`` are the field's values (:data:`MISSING` when a
    version lacks the field); return the merged value, or :data:`MISSING` to drop it.
    """

    @abc.abstractmethod
    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        """The merged value of the field."""


class Manual(Strategy):
    """Never decides: every divergent field is reported in ``MergeConflict``."""

    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        raise Unresolved(ctx.path)


class LastWriteWins(Strategy):
    """The version whose :class:`~.clock.Timestamp` is greater wins the field.

    Stamps are hybrid-logical-clock stamps ``(wall ms, logical, node)``: totally
    ordered, causal, and never equal for different writers. Versions without a stamp
    cannot be ordered and leave the field unresolved — nor can two carrying one
    stamp, or a version still carrying its base's stamp (edited without a new one:
    its stamp says nothing about when the edit was made).
    """

    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        a, b = ctx.ours.stamp, ctx.theirs.stamp
        if a is None or b is None or a == b or _stale_stamp(ctx.ours, ctx.theirs, ctx.base):
            raise Unresolved(ctx.path)
        return ours if a > b else theirs


def _stale_stamp(ours: Version, theirs: Version, base: Version | None) -> list[str]:
    """The sides whose stamp is their base's (or the other side's): edited, not stamped."""
    if ours.stamp is not None and ours.stamp == theirs.stamp:
        return ["ours", "theirs"]
    stale = base.stamp if base is not None else None
    if stale is None:
        return []
    return [side for side, v in (("ours", ours), ("theirs", theirs)) if v.stamp == stale]


class CRDTs(Strategy):
    """Both values are CRDTs of one type (:mod:`~.crdt`): the result is their merge.

    A side that lacks the field contributes nothing (the other side's value is kept).
    """

    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        if ours is MISSING and is_crdt(theirs):  # (its stamps arrive all the same)
            try:
                arrived = from_json(theirs)
                type(arrived)().merge(arrived)
            except FutureStampRefused as exc:
                raise exc.in_field(ctx.path) from None
            except ConfigurationError:
                pass  # kept as it came, as before
            return theirs
        if theirs is MISSING and is_crdt(ours):
            return ours
        if not (is_crdt(ours) and is_crdt(theirs)):
            raise Unresolved(ctx.path)
        try:
            return from_json(ours).merge(from_json(theirs)).to_json()
        except FutureStampRefused as exc:  # theirs: a stamp far ahead (named, not a conflict)
            raise exc.in_field(ctx.path) from None
        except ConfigurationError as exc:  # two different CRDT types, malformed state
            raise Unresolved(ctx.path) from exc


class Custom(Strategy):
    """Your function ``fn(base, ours, theirs) -> value`` decides (it may raise
    :class:`Unresolved`). ``base`` is :data:`MISSING` when unknown."""

    def __init__(self, fn: Callable[[Any, Any, Any], Any]) -> None:
        self.fn = fn

    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        return self.fn(base, ours, theirs)


class Nested(Strategy):
    """Merge a sub-document (a dict field) field by field with its own ``merger``."""

    def __init__(self, merger: Merger) -> None:
        self.merger = merger

    def resolve(self, base: Any, ours: Any, theirs: Any, ctx: MergeContext) -> Any:
        if not all(isinstance(v, dict) for v in (ours, theirs)):
            raise Unresolved(ctx.path)
        sub_base = base if isinstance(base, dict) else None
        unresolved: list[str] = []
        merged = self.merger._merge_fields(
            sub_base,
            ours,
            theirs,
            ctx,
            unresolved,
            prefix=ctx.path + ".",
        )
        if unresolved:
            raise Unresolved(*unresolved)
        return merged


@dataclass(frozen=True)
class Merger:
    """A merge policy: field strategies, a default, or one application function.

    Args:
        default: the strategy for fields without their own (default :class:`Manual`).
        fields: strategies by top-level field name.
        document: an application merge of whole documents ``fn(base, ours, theirs) ->
            dict`` (``base`` None when unknown); used for concurrent versions instead of
            field strategies. It may raise :class:`Unresolved`.
    """

    default: Strategy = field(default_factory=Manual)
    fields: Mapping[str, Strategy] = field(default_factory=dict)
    document: Callable[[dict[str, Any] | None, dict[str, Any], dict[str, Any]], Any] | None = None

    def merge(
        self,
        ours: Version,
        theirs: Version,
        base: Version | None = None,
        *,
        agent_id: str | None = None,
    ) -> Version:
        """Reconcile two versions (see the module docs for the order of the rules).

        Raises :class:`~statekeeper.errors.MergeConflict` carrying both versions when a
        field stays unresolved.
        """
        if ours.clock is not None and theirs.clock is not None:
            order = ours.clock.compare(theirs.clock)
            # a side is dropped whole only when its clock tells its history: one whose
            # data left the base without a tick past the base's clock (a plain save of
            # a merged document carries its old "_sync" along) has edits no clock shows
            if order is Ordering.BEFORE and _clock_tells(ours, base):
                return theirs
            if order is Ordering.AFTER and _clock_tells(theirs, base):
                return ours
            if order is Ordering.EQUAL and _same(ours.data, theirs.data):
                return ours
        ctx = MergeContext(ours, theirs, base, agent_id, "")
        if self.document is not None:
            try:
                data = self.document(
                    _copy(base.data) if base is not None else None,
                    _copy(ours.data),
                    _copy(theirs.data),
                )
            except Unresolved as exc:
                raise MergeConflict(agent_id, ours, theirs, base, _paths(exc, "")) from exc
            if not isinstance(data, dict):
                raise ConfigurationError("a document merge function must return a dict")
        else:
            unresolved: list[str] = []
            data = self._merge_fields(
                base.data if base is not None else None,
                ours.data,
                theirs.data,
                ctx,
                unresolved,
            )
            if unresolved:
                paths = tuple(unresolved)
                reason = _unstamped(self, ours, theirs, base, paths)
                raise MergeConflict(agent_id, ours, theirs, base, paths, reason)
        return Version(data, _join_clocks(ours.clock, theirs.clock), _max_stamp(ours, theirs))

    def _merge_fields(
        self,
        base: Mapping[str, Any] | None,
        ours: Mapping[str, Any],
        theirs: Mapping[str, Any],
        ctx: MergeContext,
        unresolved: list[str],
        prefix: str = "",
    ) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for name in sorted(ours.keys() | theirs.keys()):
            o = ours.get(name, MISSING)
            t = theirs.get(name, MISSING)
            b = base.get(name, MISSING) if base is not None else MISSING
            # a CRDT field is merged even when one side changed it: their merge is that
            # side's value, and it refuses a last-writer-wins stamp far ahead arriving
            crdt = isinstance(self.fields.get(name, self.default), CRDTs) and is_crdt(t)
            if _same(o, t):
                value = o
            elif base is not None and _same(o, b) and not (crdt and (is_crdt(o) or o is MISSING)):
                value = t  # only theirs changed it
            elif base is not None and _same(t, b):
                value = o  # only ours changed it
            else:
                path = prefix + name
                strategy = self.fields.get(name, self.default)
                try:
                    value = strategy.resolve(
                        _copy(b), _copy(o), _copy(t), dataclasses.replace(ctx, path=path)
                    )
                except Unresolved as exc:
                    unresolved.extend(_paths(exc, path))
                    continue
            if value is not MISSING:
                merged[name] = _copy(value)
        return merged


def _clock_tells(side: Version, base: Version | None) -> bool:
    """Whether ``side``'s vector clock accounts for its changes since ``base``: false when
    its data differs from the base's while its clock has not moved past the base's."""
    if base is None or base.clock is None or side.clock is None or _same(side.data, base.data):
        return True
    return side.clock.compare(base.clock) is Ordering.AFTER


def _unstamped(
    merger: Merger, ours: Version, theirs: Version, base: Version | None, paths: tuple[str, ...]
) -> str:
    """Why :class:`LastWriteWins` left some of ``paths`` unresolved, when it did because
    a version carries no stamp ("" otherwise)."""
    unstamped = [side for side, v in (("ours", ours), ("theirs", theirs)) if v.stamp is None]
    stale = [] if unstamped else _stale_stamp(ours, theirs, base)
    if not (unstamped or stale) or not any(_last_write_wins(merger, path) for path in paths):
        return ""
    if unstamped:
        which = "neither version carries" if len(unstamped) == 2 else f"{unstamped[0]} carries"
        why = f"{which} one"
    elif len(stale) == 2:
        why = "both versions carry the same one (edited without a new stamp)"
    else:
        why = f"{stale[0]} carries its base's (edited without a new one)"
    return (
        f"LastWriteWins orders versions by their stamps and {why} (stamp each "
        "edit: Version.edited(data, node, stamp=clock.now()) with a HybridClock)"
    )


def _last_write_wins(merger: Merger, path: str) -> bool:
    """Whether ``merger`` decides the field at ``path`` with :class:`LastWriteWins`."""
    name, _, rest = path.partition(".")
    strategy = merger.fields.get(name, merger.default)
    if isinstance(strategy, Nested) and rest:
        return _last_write_wins(strategy.merger, rest)
    return isinstance(strategy, LastWriteWins)


def _paths(exc: Unresolved, default: str) -> tuple[str, ...]:
    paths = tuple(str(a) for a in exc.args if isinstance(a, str) and a)
    return paths or ((default,) if default else ("<document>",))


def _join_clocks(a: VectorClock | None, b: VectorClock | None) -> VectorClock | None:
    return b if a is None else a if b is None else a.merge(b)


def _max_stamp(a: Version, b: Version) -> Timestamp | None:
    stamps = [s for s in (a.stamp, b.stamp) if s is not None]
    return max(stamps) if stamps else None


class MergePolicies:
    """Mergers chosen per agent type.

    ``type_of(data)`` names an agent's type from its data (by default the ``"type"``
    field); :meth:`for_data` returns the merger registered for it, else ``default``.
    """

    def __init__(
        self,
        default: Merger | None = None,
        *,
        type_of: Callable[[Mapping[str, Any]], str | None] | None = None,
    ) -> None:
        self.default = default or Merger()
        self._by_type: dict[str, Merger] = {}
        self.type_of = type_of or _type_field

    def register(self, agent_type: str, merger: Merger) -> None:
        """Use ``merger`` for agents of ``agent_type``."""
        self._by_type[agent_type] = merger

    def get(self, agent_type: str | None) -> Merger:
        """The merger of ``agent_type`` (the default one when none is registered)."""
        if agent_type is None:
            return self.default
        return self._by_type.get(agent_type, self.default)

    def for_data(self, data: Mapping[str, Any]) -> Merger:
        """The merger for an agent whose data is ``data``."""
        return self.get(self.type_of(data))


def _type_field(data: Mapping[str, Any]) -> str | None:
    value = data.get("type")
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Merged:
    """Outcome of :func:`merge_into`: the stored version, its seq, and whether a real
    merge happened (False: a fast-forward, nothing had changed in storage)."""

    version: Version
    seq: int
    merged: bool


async def merge_into(
    store: StateStore,
    agent_id: str,
    ours: Version,
    *,
    base_seq: int,
    created_at: float | None = None,
    merger: Merger | MergePolicies | None = None,
    lease: Leased | None = None,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
    meta_key: str = META_KEY,
) -> Merged:
    """Merge ``ours`` — a copy of the agent taken at ``base_seq`` and changed
    elsewhere (offline, in another region) — back into the stored agent.

    When the agent has not changed since ``base_seq`` it is a fast-forward. Otherwise
    the base is read from the agent's own history (``store.load(at_seq=base_seq)``),
    the current stored version is "theirs", and ``merger`` reconciles them; the result
    is written with ``expected_seq`` (re-merged if yet another write lands first, for up
    to ``budget`` seconds and at most ``attempts`` times when given, as :func:`update`).
    Vector clocks and stamps travel in the data under ``meta_key`` (see
    :meth:`Version.document`).

    A seq names a state only within one *incarnation* of the agent: deleted and
    created again under the same id, the stream counts from 1 again, and its seq
    ``base_seq`` is another state. Pass ``created_at`` — the
    :attr:`~statekeeper.records.Snapshot.created_at` of the state the copy was taken
    from, its incarnation — and the merge compares it with the stored stream's: a
    stream created since raises :class:`~statekeeper.errors.AgentReplaced` (nothing
    written, not retried) instead of being overwritten by the copy (a fast-forward) or
    merged against a base of another incarnation. Without it the incarnation of the
    base read at the start is compared with the stream's at every attempt (a delete
    and re-create during the merge is caught; one before the call cannot be seen).
    Each attempt's write also carries the chain link of the state it read (as a
    :class:`~statekeeper.store.agent.DurableAgent`'s write): a stream deleted and
    created again up to the same head between that read and the write is a conflict,
    and the next attempt raises :class:`~statekeeper.errors.AgentReplaced`.

    Raises :class:`~statekeeper.errors.MergeConflict` (nothing written) when the
    versions cannot be reconciled.
    """
    if isinstance(base_seq, bool) or not isinstance(base_seq, int) or base_seq < 0:
        raise InvalidArgument("base_seq", f"base_seq must be an int >= 0, not {base_seq!r}")
    limit = _Budget(attempts, budget, backoff)
    base: Version | None = None
    incarnation: float | None = None
    if created_at is not None and base_seq == 0:
        raise ConfigurationError("created_at names the incarnation of a base: give base_seq >= 1")
    if base_seq > 0:
        stored = await store.load(agent_id, at_seq=base_seq)
        if created_at is not None and stored.created_at != created_at:
            raise AgentReplaced(agent_id, base_seq, stored.seq, created_at, stored.created_at)
        base, incarnation = Version.of(stored.data, meta_key), stored.created_at

    async def once() -> Merged:
        read = Seen(0, None)  # the store puts the chain link of the state it returns here
        token = SEEN.set(read)
        try:
            current = await store.get(agent_id)
        finally:
            SEEN.reset(token)
        head = current.seq if current is not None else 0
        if incarnation is not None and (current is None or current.created_at != incarnation):
            found = None if current is None else current.created_at
            raise AgentReplaced(agent_id, base_seq, head, incarnation, found)
        if head == base_seq:
            result_version, merged = ours, False
        else:
            assert current is not None  # (base_seq > 0: no stream is AgentReplaced above)
            theirs = Version.of(current.data, meta_key)
            policy = merger if merger is not None else Merger()
            chosen = policy.for_data(theirs.data) if isinstance(policy, MergePolicies) else policy
            result_version, merged = chosen.merge(ours, theirs, base, agent_id=agent_id), True
        # the write carries the link read at ``head``: a stream deleted and created again
        # up to the same head since the read is a conflict (the next attempt reads it
        # again: AgentReplaced), not written over (as a DurableAgent's write)
        token = SEEN.set(Seen(head, read.adopted))
        try:
            result = await store.save(
                agent_id,
                result_version.document(meta_key),
                expected_seq=head,
                event_type="merge" if merged else "patch",
                lease=lease,
            )
        finally:
            SEEN.reset(token)
        return Merged(result_version, result.last_seq, merged)

    return await retry_loop(once, limit, agent_id)
