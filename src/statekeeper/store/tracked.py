"""``agent.data`` that records what changed: a save costs O(size of the change).

:class:`DurableAgent` hands out its data document as a :class:`TrackedDict` (a
``dict`` subclass: ``isinstance(agent.data, dict)``, equality, ``json.dumps`` and
``repr`` are those of a dict). Every container reached through it is wrapped lazily,
when it is handed out (``agent.data["messages"]`` is a :class:`TrackedList`, and
``agent.data["messages"][-1]`` a :class:`TrackedDict`); a container never handed out
cannot have been changed. Each tracked container records what its mutating methods
did since the last write, and a save turns those records into JSON Patch ops:

- a list that only grew at its end: one ``add …/-`` op per new item (appending one
  message to a 3,000-message history packs that one message, nothing else);
- a dict's keys set or deleted: the ops for those keys (each diffed against the
  value written last, so a key set to what it held gives no op);
- anything else (sort, reverse, insert, deletes in the middle, slice assignment,
  clear…): that one container is diffed whole against the value written last.

The tracker must never miss a change: where it cannot be sure it compares more.

- *Foreign containers*: a plain dict/list the caller inserts keeps its identity (the
  caller may hold it and mutate it later, as with a plain dict), so it is compared at
  every save (all of a container's at once, by their :mod:`marshal` bytes, in C; only
  a changed one is diffed: :func:`.tracker._same`) until :func:`sys.getrefcount`
  proves the document holds the only reference to it and to every container in
  it; it is then replaced by a tracked copy (no one can observe the identity
  change). On an interpreter where the count is not that proof (not CPython, or a
  free-threaded build) it stays foreign.
- *Aliases and foreign types*: inserting a tracked container (the same one reachable
  twice, or one from another agent), a tuple, a ``dict``/``list`` subclass, a typed
  value, or a dict with a key that is not a str switches the agent to the full
  compare of today (:func:`statekeeper.patch.diff` against the document written
  last) until it is loaded again (``refresh``). So does ``agent.data`` being
  replaced by another object.
- *Methods that hand out children* (``values``, ``items``, ``get``, ``setdefault``,
  ``pop``, iteration, slicing, ``copy``, ``+``, ``*``, ``sort(key=…)``…) wrap them
  first; ``dict(data)``, ``{**data}`` and ``list(messages)`` go through the same
  overrides (an overridden ``__iter__`` turns off CPython's copy fast paths).
  ``copy.deepcopy`` and ``pickle`` give plain containers; ``copy.copy`` a plain
  container of the (tracked) children, so a change through it is still recorded.
- A change made while a write is in flight: the containers it touched are diffed
  whole at the next save.

The document written last is kept as a private plain copy, updated by applying each
write's ops (O(size of the change)); it is what the whole-container diffs compare
against (:mod:`.tracker`). Measured in ``docs/benchmarks.md`` ("O(size of the change): built").
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, SupportsIndex

from ..errors import StatekeeperError
from .inserting import SCALARS as _SCALARS
from .inserting import foreign as _foreign
from .inserting import give_up as _give_up
from .inserting import too_deep
from .tracked_copy import deep_copy

if TYPE_CHECKING:
    from .tracker import Tracker

__all__ = ["TrackedDict", "TrackedList", "Untrackable", "plain_copy"]

# The reference count proves exclusive ownership only with the GIL on CPython.
_COUNTS = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()
_get_d = dict.__getitem__
_get_l = list.__getitem__
_set_d = dict.__setitem__
_set_l = list.__setitem__


def plain_copy(value: Any) -> Any:
    """A deep copy of the containers as plain dicts and lists (other values shared)."""
    t = type(value)
    if t is dict or t is TrackedDict:
        return {k: plain_copy(v) for k, v in dict.items(value)}
    if t is list or t is TrackedList:
        return [plain_copy(v) for v in list.__iter__(value)]
    return value


class Untrackable(StatekeeperError):
    """The document holds a value the tracker cannot follow (see the module doc); the
    tracker catches it and falls back to the full compare (never reaches users)."""


def _json_copy(value: Any) -> Any:
    """:func:`plain_copy` of a document of plain JSON only; :class:`Untrackable` else."""
    t = type(value)
    if t is dict or t is TrackedDict:
        out = {}
        for k, v in dict.items(value):
            if type(k) is not str:
                raise Untrackable(k)
            out[k] = _json_copy(v)
        return out
    if t is list or t is TrackedList:
        return [_json_copy(v) for v in list.__iter__(value)]
    if t in _SCALARS:
        return value
    raise Untrackable(t)


def _exclusive(value: Any, held: int) -> bool:
    """Whether the document holds the only reference to ``value`` and to every
    container in it (``held``: the count when only its container and this frame's
    caller chain hold it)."""
    if sys.getrefcount(value) != held:
        return False
    children = _children(value)
    if children is None:
        return False
    for v in children:
        if type(v) is dict or type(v) is list:
            if not _exclusive(v, _NESTED):
                return False
        elif type(v) not in _SCALARS:
            return False
    return True


def _children(value: Any) -> Iterable[Any] | None:
    """The values of a plain dict or the items of a plain list (None for anything
    else), read without the tracked classes' overrides; the view or iterator holds
    the container, never the children, so their reference counts are as they were."""
    if type(value) is dict:
        return dict.values(value)
    if type(value) is list:
        return list.__iter__(value)
    return None


def _probe(value: Any, seen: list[int]) -> bool:
    """:func:`_exclusive`'s shape (the same calls and frames), recording the counts."""
    seen.append(sys.getrefcount(value))
    children = _children(value)
    if children is None:
        return False
    for v in children:  # noqa: SIM110 - these frames are the ones _exclusive counts in
        if (type(v) is dict or type(v) is list) and not _probe(v, seen):
            return False
    return True


def _calibrate() -> tuple[int, int]:
    """The reference counts :func:`_exclusive` sees for containers held by their
    parent only (measured on this interpreter; any doubt: adopt nothing)."""
    box: list[Any] = [{"a": [{"b": 1}]}, [[1]]]
    seen: list[int] = []
    _probe(_get_l(box, 0), seen)
    _probe(_get_l(box, 1), seen)
    top, nested = seen[0], seen[1]
    if seen != [top, nested, nested, top, nested]:
        return -1, -1
    extra = box[0]  # one more reference must show
    more: list[int] = []
    _probe(_get_l(box, 0), more)
    del extra
    if more[0] != top + 1:
        return -1, -1
    return top, nested


_TOP, _NESTED = _calibrate() if _COUNTS else (-1, -1)


def _item_counts(items: list[Any], indexes: list[int]) -> list[int]:
    """The reference counts of ``items[i]`` (``i`` in ``indexes``, each < len)."""
    return [sys.getrefcount(_get_l(items, i)) for i in indexes]


def _calibrate_items() -> int:
    """What :func:`_item_counts` sees for an item held by its list only (-1: unsure)."""
    box: list[Any] = [{"a": 1}, [1]]
    held = _item_counts(box, [0, 1])
    extra = box[0]  # one more reference must show
    more = _item_counts(box, [0, 1])
    del extra
    if held[0] != held[1] or more != [held[0] + 1, held[1]]:
        return -1
    return held[0]


_ITEM = _calibrate_items() if _COUNTS else -1


class _Node:
    """What a tracked dict and a tracked list share: their place in the document and
    the tracker they report changes to (the slots are the subclasses')."""

    __slots__ = ()
    #: the codec serialises it as the dict or list it is (``codec.types``)
    _plain_json = True
    _t: Tracker | None
    _parent: TrackedDict | TrackedList | None
    _key: Any
    _whole: bool

    def _touch(self) -> None:
        t = self._t
        if t is not None:
            t.gen += 1
            t.touched[id(self)] = self  # type: ignore[assignment]  # (a dict or a list node)


class TrackedDict(_Node, dict[str, Any]):
    """A dict of a tracked document (see the module doc)."""

    __slots__ = ("_dirty", "_foreign", "_key", "_parent", "_t", "_whole")
    _dirty: set[str]
    _foreign: set[str]

    # -- records --------------------------------------------------------------------

    def _reset(self) -> None:
        self._dirty = set()
        self._whole = False

    def _adopt(self) -> None:
        for key in list(self._foreign):
            if _TOP >= 0 and dict.__contains__(self, key):
                if _exclusive(_get_d(self, key), _TOP):
                    self._child(key, _get_d(self, key), adopt=True)
                    self._foreign.discard(key)
            else:
                self._foreign.discard(key)

    def _put(self, key: str, value: Any) -> None:
        if type(key) is not str:
            _give_up(self._t)
        try:
            is_foreign = _foreign(value, self._t)
        except RecursionError:
            raise too_deep(self, key) from None
        if is_foreign:
            self._foreign.add(key)
        else:
            self._foreign.discard(key)
        _set_d(self, key, value)
        self._dirty.add(key)
        self._touch()

    def _child(self, key: Any, value: Any, adopt: bool = False) -> Any:
        t = type(value)
        if (t is dict or t is list) and (adopt or key not in self._foreign):
            value = (_wrap_dict if t is dict else _wrap_list)(value, self._t, self, key)
            _set_d(self, key, value)
        return value

    def _wrap_all(self) -> None:
        for key, value in list(dict.items(self)):
            self._child(key, value)

    # -- reads that hand out children -----------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self._child(key, _get_d(self, key))

    def get(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._child(key, _get_d(self, key))
        return default

    def values(self) -> Any:
        self._wrap_all()
        return dict.values(self)

    def items(self) -> Any:
        self._wrap_all()
        return dict.items(self)

    def __iter__(self) -> Any:  # (also turns off dict(x) / {**x}'s raw copy)
        return dict.__iter__(self)

    def copy(self) -> dict[str, Any]:
        self._wrap_all()
        return {k: v for k, v in dict.items(self)}

    __copy__ = copy

    def __deepcopy__(self, memo: Any) -> dict[str, Any]:
        return deep_copy(self, memo, TrackedDict, TrackedList)  # type: ignore[no-any-return]

    # a plain dict once unpickled; its items pickled one by one (pickle's memo keeps an
    # alias an alias, as for a plain dict: a plain copy in the reduce copied each apart)
    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return (dict, (), None, None, iter(list(dict.items(self))))

    def __reduce__(self) -> Any:
        return (dict, (), None, None, iter(list(dict.items(self))))

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        out = dict(other)
        out.update(self.copy())
        return out

    @classmethod
    def fromkeys(cls, iterable: Any, value: Any = None) -> Any:
        return dict.fromkeys(iterable, value)

    # -- writes ---------------------------------------------------------------------

    def __setitem__(self, key: str, value: Any) -> None:
        self._put(key, value)

    def __delitem__(self, key: str) -> None:
        dict.__delitem__(self, key)
        self._foreign.discard(key)
        self._dirty.add(key)
        self._touch()

    def setdefault(self, key: str, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self._put(key, default)
        return self._child(key, _get_d(self, key))

    def pop(self, key: str, *default: Any) -> Any:
        if dict.__contains__(self, key):
            value = self._child(key, _get_d(self, key))
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, Any]:
        if not dict.__len__(self):
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self._put(key, value)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[override]
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self._foreign = set()
        self._whole = True
        self._touch()


class TrackedList(_Node, list[Any]):
    """A list of a tracked document (see the module doc)."""

    __slots__ = ("_base", "_dirty", "_foreign", "_key", "_parent", "_t", "_whole")
    _dirty: set[int]
    _foreign: set[int]
    _base: int

    # -- records --------------------------------------------------------------------

    def _reset(self) -> None:
        if self._whole:  # indexes moved: find the children again
            self._foreign = set()
            for i, value in enumerate(list.__iter__(self)):
                t = type(value)
                if t is dict or t is list:
                    self._foreign.add(i)  # (adopted below when only the list holds it)
                elif isinstance(value, TrackedDict | TrackedList) and value._parent is self:
                    value._key = i
        self._dirty = set()
        self._whole = False
        self._base = list.__len__(self)

    def _adopt(self) -> None:
        n = list.__len__(self)
        foreign = self._foreign
        if _TOP < 0:  # (as each index was before: no proof, no record)
            foreign.clear()
            return
        foreign.difference_update([i for i in foreign if i >= n])
        order = sorted(foreign)
        if _ITEM >= 0:  # a first look at the counts in one comprehension: a message the
            # caller still holds is skipped without a call (_exclusive stays the proof)
            counts = _item_counts(self, order)
            order = [i for i, count in zip(order, counts, strict=True) if count == _ITEM]
        for i in order:
            if _exclusive(_get_l(self, i), _TOP):
                self._child(i, _get_l(self, i), adopt=True)
                foreign.discard(i)

    def _whole_change(self) -> None:
        self._whole = True
        # indexes moved: every plain child may be one the caller holds (foreign) until
        # the save proves otherwise (O(n), as the change itself)
        self._foreign = {
            i for i, v in enumerate(list.__iter__(self)) if type(v) is dict or type(v) is list
        }
        self._touch()

    def _index(self, i: SupportsIndex) -> int:
        n = list.__len__(self)
        j = i.__index__()
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError("list index out of range")
        return j

    def _child(self, i: int, value: Any, adopt: bool = False) -> Any:
        t = type(value)
        if (t is dict or t is list) and (adopt or i not in self._foreign):
            value = (_wrap_dict if t is dict else _wrap_list)(value, self._t, self, i)
            _set_l(self, i, value)
        return value

    def _wrap_all(self) -> None:
        for i in range(list.__len__(self)):
            self._child(i, _get_l(self, i))

    # -- reads that hand out children -----------------------------------------------

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            for j in range(*i.indices(list.__len__(self))):
                self._child(j, _get_l(self, j))
            return _get_l(self, i)
        j = self._index(i)
        return self._child(j, _get_l(self, j))

    def __iter__(self) -> Any:
        i = 0
        while i < list.__len__(self):
            yield self._child(i, _get_l(self, i))
            i += 1

    def __reversed__(self) -> Any:
        i = list.__len__(self) - 1
        while i >= 0:
            if i < list.__len__(self):
                yield self._child(i, _get_l(self, i))
            i -= 1

    def copy(self) -> list[Any]:
        self._wrap_all()
        return list.copy(self)

    __copy__ = copy

    def __deepcopy__(self, memo: Any) -> list[Any]:
        return deep_copy(self, memo, TrackedDict, TrackedList)  # type: ignore[no-any-return]

    # (as TrackedDict's: a plain list once unpickled, aliases kept)
    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return (list, (), None, iter(list(list.__iter__(self))))

    def __reduce__(self) -> Any:
        return (list, (), None, iter(list(list.__iter__(self))))

    def __add__(self, other: Any) -> Any:
        self._wrap_all()
        return list.__add__(self, other)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        self._wrap_all()
        return list.__add__(other, list.copy(self))

    def __mul__(self, n: SupportsIndex) -> Any:
        self._wrap_all()
        return list.__mul__(self, n)

    __rmul__ = __mul__

    # -- writes ---------------------------------------------------------------------

    def _insertable(self, value: Any) -> bool:
        try:
            return _foreign(value, self._t)
        except RecursionError:
            raise too_deep(self, list.__len__(self)) from None

    def __setitem__(self, i: Any, value: Any) -> None:
        if isinstance(i, slice):
            values = list(value)
            for v in values:
                self._insertable(v)
            _set_l(self, i, values)
            self._whole_change()
            return
        j = self._index(i)
        if self._insertable(value):
            self._foreign.add(j)
        else:
            self._foreign.discard(j)
        _set_l(self, j, value)
        if j < self._base:
            self._dirty.add(j)
        self._touch()

    def __delitem__(self, i: Any) -> None:
        if not isinstance(i, slice):
            j = self._index(i)
            if j == list.__len__(self) - 1 and j >= self._base:  # an appended one
                list.__delitem__(self, j)
                self._foreign.discard(j)
                self._touch()
                return
        list.__delitem__(self, i)
        self._whole_change()

    def append(self, value: Any) -> None:
        if self._insertable(value):
            self._foreign.add(list.__len__(self))
        list.append(self, value)
        self._touch()

    def extend(self, values: Any) -> None:
        for value in list(values):
            self.append(value)

    def __iadd__(self, values: Any) -> TrackedList:
        self.extend(values)
        return self

    def __imul__(self, n: SupportsIndex) -> TrackedList:
        if n.__index__() > 1 and any(
            not isinstance(v, str | int | float | type(None)) for v in list.__iter__(self)
        ):
            _give_up(self._t)  # the same containers, several times
        list.__imul__(self, n)
        self._whole_change()
        return self

    def insert(self, i: SupportsIndex, value: Any) -> None:
        self._insertable(value)
        list.insert(self, i, value)
        self._whole_change()

    def pop(self, i: SupportsIndex = -1) -> Any:
        j = self._index(i) if list.__len__(self) else None
        if j is None:
            raise IndexError("pop from empty list")
        value = self._child(j, _get_l(self, j)) if j not in self._foreign else _get_l(self, j)
        del self[j]
        return value

    def remove(self, value: Any) -> None:
        list.remove(self, value)
        self._whole_change()

    def clear(self) -> None:
        list.clear(self)
        self._whole_change()

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        if key is not None:
            self._wrap_all()  # the key function sees the children
        list.sort(self, key=key, reverse=reverse)
        self._whole_change()

    def reverse(self) -> None:
        list.reverse(self)
        self._whole_change()


def _wrap_dict(value: dict[str, Any], t: Tracker | None, parent: Any, key: Any) -> TrackedDict:
    w = dict.__new__(TrackedDict)
    dict.update(w, value)
    w._t, w._parent, w._key = t, parent, key
    w._dirty, w._foreign, w._whole = set(), set(), False
    return w


def _wrap_list(value: list[Any], t: Tracker | None, parent: Any, key: Any) -> TrackedList:
    w = list.__new__(TrackedList)
    list.extend(w, value)
    w._t, w._parent, w._key = t, parent, key
    w._dirty, w._foreign, w._whole, w._base = set(), set(), False, len(value)
    return w
