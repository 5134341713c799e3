"""State-based CRDTs that live in an agent's JSON data.

Each type is an immutable value: operations return a new value, and ``a.merge(b)``
is **commutative** (``a⊔b == b⊔a``), **associative** (``(a⊔b)⊔c == a⊔(b⊔c)``) and
**idempotent** (``a⊔a == a``) — so replicas that exchange states in any order, any
number of times, converge (Shapiro et al., 2011). These laws are property-tested for
every type.

==================  ==============================  =========================================
type                value                           merge
==================  ==============================  =========================================
:class:`GCounter`   an int that only grows          per-node maximum
:class:`PNCounter`  an int (increments, decrements) two G-counters
:class:`LWWRegister` one JSON value                 greatest :class:`~.clock.Timestamp` wins
:class:`LWWMap`     a dict of JSON values           one LWW register per key (deletes too)
:class:`ORSet`      a set of JSON values            observed-remove: a concurrent add wins
:class:`AppendOnlyList` a list (e.g. messages)      union, ordered by timestamp
==================  ==============================  =========================================

Ties are broken deterministically (a timestamp carries its node id; equal stamps fall
back to comparing the values' canonical JSON), never by arrival order.

Every type round-trips through JSON as ``{"$crdt": <type>, "state": …}`` so it can
be stored in an agent's data document; :func:`from_json` reads any of them back and
:func:`is_crdt` recognises one.

>>> a = GCounter().increment("worker-1", 2)
>>> b = GCounter().increment("worker-2", 3)
>>> a.merge(b).value, a.merge(b) == b.merge(a)
(5, True)
>>> from_json(a.merge(b).to_json()) == a.merge(b)
True
"""

from __future__ import annotations

import abc
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

import orjson

from ..errors import ConfigurationError, CounterOverflow
from .clock import DEFAULT_MAX_DRIFT, Timestamp, ahead_of_now
from .clock import refuse_future as _future

__all__ = [
    "CRDT",
    "AppendOnlyList",
    "GCounter",
    "LWWMap",
    "LWWRegister",
    "ORSet",
    "PNCounter",
    "from_json",
    "is_crdt",
]

TAG = "$crdt"

C = TypeVar("C", bound="CRDT")


def find_non_finite(value: Any) -> float | None:
    """The first NaN or infinity inside a JSON value (None: there is none). orjson
    writes them as ``null``: a copy through JSON would turn them into None silently."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
        elif isinstance(node, float) and not math.isfinite(node):
            return node
    return None


def _canon(value: Any) -> str:
    """Canonical JSON of a value: the identity of set elements and the last tie-break."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise ConfigurationError(f"CRDT values must be JSON values: {exc}") from exc
    if b"null" in out and (bad := find_non_finite(value)) is not None:
        raise ConfigurationError(f"CRDT values must be JSON values, not the float {bad!r}")
    return out.decode()


def _copy(value: Any) -> Any:
    """A private copy of a JSON value (so no caller can mutate a CRDT's state)."""
    return orjson.loads(_canon(value))


def _node(node: Any) -> str:
    if not isinstance(node, str) or not node:
        raise ConfigurationError(f"node ids are non-empty strings, not {node!r}")
    return node


#: a counter slot's largest count: agent data's codecs (orjson, MessagePack) are 64-bit
MAX_COUNT = 2**64 - 1


def _count(value: Any, what: str, *, bounded: bool = True) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{what} must be an int >= 0, not {value!r}")
    if bounded and value > MAX_COUNT:
        raise ConfigurationError(f"{what} must be at most 2**64 - 1, not {value}")
    return value


class CRDT(abc.ABC):
    """Base of the CRDT types: immutable, mergeable, JSON-serializable."""

    #: the ``"$crdt"`` name in the JSON form
    type_name: ClassVar[str]
    _registry: ClassVar[dict[str, type[CRDT]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        CRDT._registry[cls.type_name] = cls

    @abc.abstractmethod
    def merge(self: C, other: C) -> C:
        """The least upper bound of both states (commutative, associative, idempotent)."""

    @property
    @abc.abstractmethod
    def value(self) -> Any:
        """The plain value the state stands for."""

    @abc.abstractmethod
    def _state(self) -> Any:
        """The JSON state (canonical: equal states give equal JSON)."""

    @classmethod
    @abc.abstractmethod
    def _from_state(cls: type[C], state: Any) -> C:
        """Rebuild from :meth:`_state`."""

    def to_json(self) -> dict[str, Any]:
        """``{"$crdt": type_name, "state": …}``: store it in agent data."""
        return {TAG: self.type_name, "state": self._state()}

    @classmethod
    def from_json(cls: type[C], value: Any) -> C:
        """Read this type from its JSON form (raises ``ConfigurationError``)."""
        if not is_crdt(value) or value[TAG] != cls.type_name:
            raise ConfigurationError(f"not a {cls.type_name} CRDT: {value!r}")
        try:
            return cls._from_state(value["state"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ConfigurationError(f"malformed {cls.type_name} state: {exc}") from exc

    def _check(self, other: CRDT) -> None:
        if type(other) is not type(self):
            raise ConfigurationError(
                f"cannot merge {type(self).__name__} with {type(other).__name__}"
            )

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, CRDT)
        return _canon(self._state()) == _canon(other._state())

    def __hash__(self) -> int:
        return hash((self.type_name, _canon(self._state())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


def is_crdt(value: Any) -> bool:
    """True when ``value`` is the JSON form of a known CRDT type."""
    return (
        isinstance(value, dict)
        and isinstance(value.get(TAG), str)
        and value[TAG] in CRDT._registry
        and "state" in value
    )


def from_json(value: Any) -> CRDT:
    """Rebuild any CRDT from its JSON form."""
    if not is_crdt(value):
        raise ConfigurationError(f"not a CRDT: {value!r}")
    return CRDT._registry[value[TAG]].from_json(value)


# -- counters ---------------------------------------------------------------------------


class GCounter(CRDT):
    """A grow-only counter: each node increments its own slot; merge keeps the maximum."""

    type_name = "g-counter"
    __slots__ = ("_counts",)

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts = {
            _node(n): _count(c, "a counter") for n, c in sorted((counts or {}).items()) if c
        }

    def increment(self, node: str, by: int = 1) -> GCounter:
        """Add ``by`` (>= 0) on behalf of ``node``."""
        counts = dict(self._counts)
        total = counts.get(node, 0) + _count(by, "an increment", bounded=False)
        if total > MAX_COUNT:  # (refused before it is a count no store could save)
            raise CounterOverflow(node, total, MAX_COUNT)
        counts[_node(node)] = total
        return GCounter(counts)

    def merge(self, other: GCounter) -> GCounter:
        self._check(other)
        counts = dict(self._counts)
        for node, count in other._counts.items():
            counts[node] = max(counts.get(node, 0), count)
        return GCounter(counts)

    @property
    def value(self) -> int:
        return sum(self._counts.values())

    def _state(self) -> Any:
        return dict(self._counts)

    @classmethod
    def _from_state(cls, state: Any) -> GCounter:
        return cls(dict(state))


class PNCounter(CRDT):
    """A counter that goes up and down: one G-counter of increments, one of decrements."""

    type_name = "pn-counter"
    __slots__ = ("_n", "_p")

    def __init__(self, p: GCounter | None = None, n: GCounter | None = None) -> None:
        self._p = p or GCounter()
        self._n = n or GCounter()

    def increment(self, node: str, by: int = 1) -> PNCounter:
        """Add ``by`` (any int; negative decrements) on behalf of ``node``."""
        if isinstance(by, bool) or not isinstance(by, int):
            raise ConfigurationError(f"an increment must be an int, not {by!r}")
        if by >= 0:
            return PNCounter(self._p.increment(node, by), self._n)
        return PNCounter(self._p, self._n.increment(node, -by))

    def decrement(self, node: str, by: int = 1) -> PNCounter:
        """Subtract ``by`` on behalf of ``node``."""
        return self.increment(node, -by)

    def merge(self, other: PNCounter) -> PNCounter:
        self._check(other)
        return PNCounter(self._p.merge(other._p), self._n.merge(other._n))

    @property
    def value(self) -> int:
        return self._p.value - self._n.value

    def _state(self) -> Any:
        return {"p": self._p._state(), "n": self._n._state()}

    @classmethod
    def _from_state(cls, state: Any) -> PNCounter:
        return cls(GCounter(dict(state["p"])), GCounter(dict(state["n"])))


class LWWRegister(CRDT):
    """One value; the write with the greatest :class:`~.clock.Timestamp` wins.

    An empty register (never set) has ``stamp`` None and ``value`` None.
    """

    type_name = "lww-register"
    __slots__ = ("_canon", "_stamp", "_value")

    def __init__(self, value: Any = None, stamp: Timestamp | None = None) -> None:
        if stamp is None and value is not None:
            raise ConfigurationError("a register value needs a timestamp")
        self._value = _copy(value)
        self._stamp = stamp
        self._canon = _canon(value)

    def set(
        self, value: Any, stamp: Timestamp, *, max_drift: float | None = DEFAULT_MAX_DRIFT
    ) -> LWWRegister:
        """Write ``value`` at ``stamp`` (a no-op when the current stamp is greater;
        refused when that stamp, or ``stamp``, is too far ahead: see :meth:`merge`)."""
        if self._stamp is not None and self._stamp > stamp:
            _future(None, self._stamp, max_drift, True)
        return self.merge(LWWRegister(value, stamp), max_drift=max_drift)

    @property
    def stamp(self) -> Timestamp | None:
        """The stamp of the winning write (None if never written)."""
        return self._stamp

    def merge(
        self, other: LWWRegister, *, max_drift: float | None = DEFAULT_MAX_DRIFT
    ) -> LWWRegister:
        """The greater stamp's write (``other``'s refused if too far ahead: see LWWMap)."""
        self._check(other)
        if other._stamp is None:
            return self
        # greater stamp, then greater canonical value (never the order of the merge)
        if self._stamp is None or (other._stamp, other._canon) > (self._stamp, self._canon):
            _future(None, other._stamp, max_drift)
            return other
        return self

    def without_future(self, *, max_drift: float | None = DEFAULT_MAX_DRIFT) -> LWWRegister:
        """This register, empty if its stamp is over ``max_drift`` s ahead of now."""
        if self._stamp is not None and ahead_of_now(self._stamp, max_drift) is not None:
            return LWWRegister()
        return self

    @property
    def value(self) -> Any:
        return _copy(self._value)

    def _state(self) -> Any:
        if self._stamp is None:
            return None
        return {"value": self._value, "stamp": self._stamp.to_json()}

    @classmethod
    def _from_state(cls, state: Any) -> LWWRegister:
        if state is None:
            return cls()
        return cls(state["value"], Timestamp.from_json(state["stamp"]))


class LWWMap(CRDT):
    """A dict whose every key is a last-writer-wins register; deletes are timestamped
    too (a tombstone), so a delete and a concurrent set are ordered by their stamps.

    Tombstones are kept (they are what makes a delete survive a merge with a replica
    that has not seen it).
    """

    type_name = "lww-map"
    __slots__ = ("_entries",)

    # key -> (stamp, deleted, canonical value, value)
    def __init__(self, entries: Mapping[str, tuple[Timestamp, bool, Any]] | None = None) -> None:
        self._entries: dict[str, tuple[Timestamp, bool, str, Any]] = {}
        for key, (stamp, deleted, value) in sorted((entries or {}).items()):
            if not isinstance(key, str):
                raise ConfigurationError(f"LWW map keys are strings, not {key!r}")
            stored = None if deleted else _copy(value)
            self._entries[key] = (stamp, bool(deleted), _canon(stored), stored)

    def _with(
        self, key: str, stamp: Timestamp, deleted: bool, value: Any, max_drift: float | None
    ) -> LWWMap:
        mine = self._entries.get(key)
        if mine is not None and mine[0] > stamp:  # this write loses: say why if it should not
            _future(key, mine[0], max_drift, True)
        other = LWWMap({key: (stamp, deleted, value)})
        return self.merge(other, max_drift=max_drift)

    def set(
        self, key: str, value: Any, stamp: Timestamp, *, max_drift: float | None = DEFAULT_MAX_DRIFT
    ) -> LWWMap:
        """Write ``key`` at ``stamp``; refused when ``stamp``, or the stored stamp this
        write would lose to, is over ``max_drift`` s ahead of now (see :meth:`merge`)."""
        return self._with(key, stamp, False, value, max_drift)

    def delete(
        self, key: str, stamp: Timestamp, *, max_drift: float | None = DEFAULT_MAX_DRIFT
    ) -> LWWMap:
        """Delete ``key`` at ``stamp`` (beats smaller stamps; refused as :meth:`set` is)."""
        return self._with(key, stamp, True, None, max_drift)

    def get(self, key: str, default: Any = None) -> Any:
        """The live value of ``key``."""
        entry = self._entries.get(key)
        return default if entry is None or entry[1] else _copy(entry[3])

    def stamp(self, key: str) -> Timestamp | None:
        """The stamp of the last write or delete of ``key``."""
        entry = self._entries.get(key)
        return entry[0] if entry is not None else None

    def merge(self, other: LWWMap, *, max_drift: float | None = DEFAULT_MAX_DRIFT) -> LWWMap:
        """Per key, the write or delete with the greater stamp. An entry of ``other``
        that would win with a stamp more than ``max_drift`` seconds (None: no bound)
        ahead of this node's wall clock refuses the whole merge (``FutureStampRefused``
        naming its key: it would win every later write to that key). Entries held
        already are not refused: stored data stays readable."""
        self._check(other)
        out = LWWMap()
        entries = dict(self._entries)
        for key, theirs in other._entries.items():
            mine = entries.get(key)
            # order: stamp, then a delete over a write, then canonical value
            if mine is None or (theirs[0], theirs[1], theirs[2]) > (mine[0], mine[1], mine[2]):
                _future(key, theirs[0], max_drift)
                entries[key] = theirs
        out._entries = dict(sorted(entries.items()))
        return out

    def future_keys(self, *, max_drift: float | None = DEFAULT_MAX_DRIFT) -> list[str]:
        """Keys stamped over ``max_drift`` s ahead of now (writes to them are refused)."""
        return [k for k, e in self._entries.items() if ahead_of_now(e[0], max_drift) is not None]

    def without_future(self, *, max_drift: float | None = DEFAULT_MAX_DRIFT) -> LWWMap:
        """Without the :meth:`future_keys` entries (a replica still holding them is
        refused when merged here, until it drops them too)."""
        out = LWWMap()
        bad = set(self.future_keys(max_drift=max_drift))
        out._entries = {k: e for k, e in self._entries.items() if k not in bad}
        return out

    @property
    def value(self) -> dict[str, Any]:
        return {k: _copy(e[3]) for k, e in self._entries.items() if not e[1]}

    def _state(self) -> Any:
        return {
            k: {"stamp": e[0].to_json(), **({"deleted": True} if e[1] else {"value": e[3]})}
            for k, e in self._entries.items()
        }

    @classmethod
    def _from_state(cls, state: Any) -> LWWMap:
        entries = {}
        for k, e in dict(state).items():
            if type(gone := e.get("deleted", False)) is not bool or ("value" in e) == gone:
                raise ValueError(f"key {k!r} needs a value or (only) deleted: true, not {e!r}")
            entries[k] = (Timestamp.from_json(e["stamp"]), gone, e.get("value"))
        return cls(entries)


# -- sets and lists -----------------------------------------------------------------------


def _scoped(tag: str, key: str) -> str:
    """``tag`` made the tag of one element (``key``: its canonical JSON) only."""
    if not isinstance(tag, str):
        raise ConfigurationError(f"an ORSet tag must be a string, not {type(tag).__name__}")
    return f"{tag}@{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}"


def _tag_list(tags: Any) -> frozenset[str]:
    if not isinstance(tags, list):  # (a string would be read as its characters)
        raise ValueError(f"ORSet tags are a list, not {tags!r}")
    return frozenset(tags)


class ORSet(CRDT):
    """An observed-remove set of JSON values.

    Every add carries a unique tag; a remove deletes the tags it has *observed*. An add
    concurrent with a remove therefore survives (add wins), and re-adding after a
    remove works. Removed tags are kept as tombstones.

    A tag given to :meth:`add` is stored scoped to its element (``tag@<digest of the
    element>``), so one tag picked for two elements — on two replicas, or one — is two
    tags: removing one element never removes the other. (A tag stored unscoped by an
    older version stays as it was.) A random tag is unique as it is.
    """

    type_name = "or-set"
    __slots__ = ("_adds", "_removed")

    def __init__(
        self,
        adds: Mapping[str, tuple[Any, Iterable[str]]] | None = None,
        removed: Iterable[str] = (),
    ) -> None:
        # canonical element -> (element, tags)
        self._adds: dict[str, tuple[Any, frozenset[str]]] = {}
        for key, (element, tags) in sorted((adds or {}).items()):
            tag_set = frozenset(tags)
            if tag_set:
                self._adds[key] = (_copy(element), tag_set)
        self._removed = frozenset(removed)

    def add(self, element: Any, tag: str | None = None) -> ORSet:
        """Add ``element`` under a new unique ``tag`` (a random one by default; a given
        one is scoped to the element: see the class documentation)."""
        key = _canon(element)
        scoped = uuid.uuid4().hex if tag is None else _scoped(tag, key)
        if scoped in self._removed:
            raise ConfigurationError(
                f"tag {tag!r} was already used for this element and removed: give a new one"
            )
        adds = dict(self._adds)
        _, tags = adds.get(key, (element, frozenset()))
        adds[key] = (element, tags | {scoped})
        return ORSet(adds, self._removed)

    def remove(self, element: Any) -> ORSet:
        """Remove ``element`` as observed here (a concurrent add elsewhere survives)."""
        key = _canon(element)
        entry = self._adds.get(key)
        if entry is None:
            return self
        adds = dict(self._adds)
        del adds[key]
        return ORSet(adds, self._removed | entry[1])

    def __contains__(self, element: Any) -> bool:
        return _canon(element) in self._live()

    def _live(self) -> dict[str, Any]:
        return {key: element for key, (element, tags) in self._adds.items() if tags - self._removed}

    def merge(self, other: ORSet) -> ORSet:
        self._check(other)
        removed = self._removed | other._removed
        adds: dict[str, tuple[Any, frozenset[str]]] = {}
        for source in (self._adds, other._adds):
            for key, (element, tags) in source.items():
                _, have = adds.get(key, (element, frozenset()))
                adds[key] = (element, have | tags)
        live = {k: (e, t - removed) for k, (e, t) in adds.items()}
        return ORSet({k: v for k, v in live.items() if v[1]}, removed)

    @property
    def value(self) -> list[Any]:
        """The elements, in canonical-JSON order (a set has no order of its own)."""
        return [_copy(e) for _, e in sorted(self._live().items())]

    def _state(self) -> Any:
        adds = []
        for _, (element, tags) in sorted(self._adds.items()):
            live = tags - self._removed
            if live:
                adds.append([element, sorted(live)])
        return {"adds": adds, "removed": sorted(self._removed)}

    @classmethod
    def _from_state(cls, state: Any) -> ORSet:
        adds: dict[str, tuple[Any, frozenset[str]]] = {}
        for e, tags in state["adds"]:  # (one element listed twice: all its tags)
            adds[_canon(e)] = (e, adds.get(_canon(e), (e, frozenset()))[1] | _tag_list(tags))
        return cls(adds, _tag_list(state["removed"]))


class AppendOnlyList(CRDT):
    """An append-only list (a chat transcript, an audit trail).

    Each item is identified by the :class:`~.clock.Timestamp` of its append — whose
    node id makes it unique per writer — and its value, and the list is ordered by
    them. Merge is the union of items, so appends made concurrently on different
    replicas are all kept, interleaved by their stamps, and every replica shows the
    same order. Two different values appended at one stamp (two writers sharing a node
    id) are both kept, ordered by their canonical JSON; the same value at one stamp is
    one item (merging again adds nothing).
    """

    type_name = "append-only-list"
    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[Timestamp, Any]] = ()) -> None:
        chosen: dict[tuple[Timestamp, str], Any] = {}
        for stamp, value in items:
            canon = _canon(value)
            if (stamp, canon) not in chosen:
                chosen[(stamp, canon)] = _copy(value)
        self._items = dict(sorted(chosen.items()))

    def append(self, value: Any, stamp: Timestamp) -> AppendOnlyList:
        """Append ``value`` with id ``stamp`` (use a :class:`~.clock.HybridClock`)."""
        return self.merge(AppendOnlyList([(stamp, value)]))

    def merge(self, other: AppendOnlyList) -> AppendOnlyList:
        self._check(other)
        items = [(s, v) for (s, _), v in self._items.items()]
        items.extend((s, v) for (s, _), v in other._items.items())
        return AppendOnlyList(items)

    @property
    def value(self) -> list[Any]:
        return [_copy(v) for v in self._items.values()]

    @property
    def stamps(self) -> list[Timestamp]:
        """The items' stamps, in list order."""
        return [stamp for stamp, _ in self._items]

    def __len__(self) -> int:
        return len(self._items)

    def _state(self) -> Any:
        return [[s.to_json(), v] for (s, _), v in self._items.items()]

    @classmethod
    def _from_state(cls, state: Any) -> AppendOnlyList:
        return cls((Timestamp.from_json(s), v) for s, v in state)
