"""The stored keys a model does not declare, carried through a typed write at any depth.

pydantic drops the keys of a document that its model — or a nested model, dataclass or
TypedDict, inside a field, a list or a dict — does not declare (``extra="ignore"``, the
default) when it validates it. A typed write of the state alone would delete them: a
field another writer (an older or newer version, an untyped tool) added to a nested
object would vanish at the next typed save. :func:`carry` puts them back: it walks the
new document beside the stored one, guided by the state's types (and, for unions, by
the state's own values), and copies every stored key that a model-like position does
not declare and the new document lacks.

Where the two documents line up is clear for fields and dict keys (the same name). A
list of objects is matched item by item (:meth:`Carrier._pairs`):

0. an item object of the state as it was loaded or last written (:func:`known_items`,
   kept by the typed agent and by ``TypedStates.load``) is the same item wherever it is
   now; one no longer in the list was removed (or replaced by a new object) by the
   typed code, its undeclared keys with it;
1. an item whose declared content is unchanged at the same index, then one whose
   declared content is found elsewhere (moved, or shifted by an insert or a removal),
   is the same item;
2. the items left are aligned between those matched neighbours (in the order of the
   stored list): in each gap, the new and stored items left pair in order when their
   numbers are equal (edited in place); new items alone in a gap were inserted, stored
   items alone were removed by the typed writer (their undeclared keys go with them);
3. if new and stored items are still left after that (items edited *and* others
   inserted, removed or moved across them in one write), which is which is not known:
   the undeclared keys of those stored items are not attached to a guessed item; they
   are reported instead (:class:`~statekeeper.errors.UndeclaredKeysDropped`, a warning
   naming the agent, the model and the list's path — never a value).

Only positions the types describe are walked: a value typed ``Any``, a union of
several object types none of which the state's value is, or a non-JSON container
carries nothing below it.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import itertools
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

import pydantic
from typing_extensions import is_typeddict

__all__ = ["Carrier", "Known", "carries", "known_items"]

MODEL_KEY = "$model"  # (models.MODEL_KEY: the top-level key naming the model)

#: the origins (``get_origin``) of the types a dict / a list is validated as
_MAPPINGS = frozenset({dict, cabc.Mapping, cabc.MutableMapping})
_SEQUENCES = frozenset({list, tuple, cabc.Sequence, cabc.MutableSequence})
_NONE = type(None)


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    origin = get_origin(tp)
    return origin is Union or origin is types.UnionType


def _hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved: carry nothing below it
        return {}


class _Shape:
    """A model-like position: the keys it declares (None: it keeps or refuses the others
    itself) and, per dumped key, the field's type and (when known) its value."""

    __slots__ = ("declared", "fields")

    def __init__(self, declared: frozenset[str] | None, fields: dict[str, tuple[Any, Any]]) -> None:
        self.declared = declared
        self.fields = fields


_MISSING: Any = object()


def _model_shape(value: Any, new: Mapping[str, Any]) -> _Shape | None:
    """The shape of a pydantic model or dataclass instance (its own class: a subclass
    or a union member is told by the value itself)."""
    from .models import _declared

    cls = type(value)
    if isinstance(value, pydantic.BaseModel):
        fields: dict[str, tuple[Any, Any]] = {}
        for name, info in cls.model_fields.items():
            key = name
            if key not in new:
                alias = info.serialization_alias or info.alias
                if isinstance(alias, str):
                    key = alias
            fields[key] = (info.annotation, getattr(value, name, _MISSING))
        return _Shape(_declared(cls, "pydantic"), fields)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = _hints(cls)
        fields = {
            f.name: (hints.get(f.name, Any), getattr(value, f.name, _MISSING))
            for f in dataclasses.fields(value)
        }
        return _Shape(_declared(cls, "dataclass"), fields)
    return None


def _typeddict_shape(tp: Any, value: Any) -> _Shape:
    from .models import _declared

    hints = _hints(tp)
    get = value.get if isinstance(value, Mapping) else (lambda _k, d=None: d)
    return _Shape(_declared(tp, "typeddict"), {k: (h, get(k, _MISSING)) for k, h in hints.items()})


def _resolve(tp: Any, value: Any, doc: Any) -> Any:
    """The one type of ``tp`` that describes ``value`` (a union's member), or None."""
    tp = _strip(tp)
    if not _is_union(tp):
        return tp
    members = [_strip(m) for m in get_args(tp) if m is not _NONE]
    if value is not _MISSING and value is not None:
        for m in members:
            if isinstance(m, type) and not is_typeddict(m) and type(value) is m:
                return m
    if len(members) == 1:
        return members[0]
    if isinstance(doc, dict):
        dicts = [m for m in members if is_typeddict(m) or get_origin(m) in _MAPPINGS]
        if len(dicts) == 1:
            return dicts[0]
    if isinstance(doc, list):
        lists = [m for m in members if get_origin(m) in _SEQUENCES]
        if len(lists) == 1:
            return lists[0]
    return None


def carries(tp: Any, seen: set[int] | None = None) -> bool:
    """Whether some position of ``tp`` drops undeclared keys (a model, dataclass or
    TypedDict that ignores them, at any depth): False means a typed write loses nothing
    and needs no stored state to carry from."""
    from .models import _declared, model_kind

    seen = set() if seen is None else seen
    tp = _strip(tp)
    if id(tp) in seen:
        return False
    seen.add(id(tp))
    if tp is Any or isinstance(tp, typing.TypeVar):
        return False
    if _is_union(tp):
        return any(carries(m, seen) for m in get_args(tp))
    try:
        kind = model_kind(tp)
    except Exception:
        kind = None
    if kind is not None:
        if _declared(tp, kind) is not None:
            return True
        if kind == "pydantic":
            children = [info.annotation for info in tp.model_fields.values()]
        else:
            children = list(_hints(tp).values())
        return any(carries(c, seen) for c in children)
    return any(carries(a, seen) for a in get_args(tp) if a is not Ellipsis)


class Carrier:
    """One write's carry: :meth:`merge` the stored document's undeclared keys into the
    new one; :attr:`dropped` lists the list paths where some could not be matched."""

    __slots__ = ("dropped", "known")

    def __init__(self, known: Known | None = None) -> None:
        self.dropped: list[str] = []
        #: the list items of the state the stored document was made from or loaded
        #: into, by identity (:func:`known_items`): such an item is the same item
        #: wherever it is now, however it was edited
        self.known: Known = known or {}

    def merge(self, tp: Any, value: Any, new: Any, old: Any, path: str = "") -> Any:
        """``new`` with the undeclared keys of ``old`` put back where they belong: ``new``
        itself when there is nothing to put back, else a copy (``new`` and ``old`` are
        never changed; the subtrees that did not change are shared)."""
        if new is old or old is None or old is _MISSING:
            return new
        tnew = type(new)
        if tnew is not type(old) or tnew not in (dict, list) or new == old:
            return new  # (equal: no key to put back below; one C-level comparison)
        shape: _Shape | None = None
        if value is not _MISSING and value is not None:
            shape = _model_shape(value, new) if tnew is dict else None
        rtp = _resolve(tp, value, new) if shape is None else None
        if shape is None and rtp is not None and is_typeddict(rtp) and tnew is dict:
            shape = _typeddict_shape(rtp, value)
        if shape is not None:
            return self._object(shape, new, old, path)
        if rtp is None:
            return new
        origin = get_origin(rtp)
        args = get_args(rtp)
        if tnew is dict and origin in _MAPPINGS and len(args) == 2:
            return self._mapping(args[1], value, new, old, path)
        if tnew is list and origin in _SEQUENCES and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return self._fixed(args, value, new, old, path)
            return self._list(args[0], value, new, old, path)
        return new

    def _object(self, shape: _Shape, new: dict[str, Any], old: dict[str, Any], path: str) -> Any:
        out: dict[str, Any] | None = None
        declared = shape.declared
        if declared is not None:
            for key, item in old.items():
                if key not in new and key not in declared and (path or key != MODEL_KEY):
                    if out is None:
                        out = dict(new)
                    # a copy: the stored document may be the store's own (cached)
                    out[key] = item if type(item) in _SCALARS else _copy(item)
        for key, (ftp, fvalue) in shape.fields.items():
            if key in new and key in old:
                sub = new[key]
                merged = self.merge(ftp, fvalue, sub, old[key], _join(path, key))
                if merged is not sub:
                    if out is None:
                        out = dict(new)
                    out[key] = merged
        return new if out is None else out

    def _mapping(
        self, vtp: Any, value: Any, new: dict[str, Any], old: dict[str, Any], path: str
    ) -> Any:
        out: dict[str, Any] | None = None
        values = value if isinstance(value, Mapping) else {}
        for key, sub in new.items():
            if key in old:
                merged = self.merge(vtp, values.get(key, _MISSING), sub, old[key], _join(path, key))
                if merged is not sub:
                    if out is None:
                        out = dict(new)
                    out[key] = merged
        return new if out is None else out

    def _fixed(
        self, args: tuple[Any, ...], value: Any, new: list[Any], old: list[Any], path: str
    ) -> Any:
        values = _items(value, len(new))
        out: list[Any] | None = None
        for i, (itp, sub, before) in enumerate(zip(args, new, old, strict=False)):
            merged = self.merge(itp, values[i], sub, before, f"{path}[{i}]")
            if merged is not sub:
                if out is None:
                    out = list(new)
                out[i] = merged
        return new if out is None else out

    def _list(self, itp: Any, value: Any, new: list[Any], old: list[Any], path: str) -> Any:
        values = _items(value, len(new))
        pairs = self._pairs(itp, values, new, old, path)
        out: list[Any] | None = None
        for i, j in pairs.items():
            sub = new[i]
            merged = self.merge(itp, values[i], sub, old[j], f"{path}[{i}]")
            if merged is not sub:
                if out is None:
                    out = list(new)
                out[i] = merged
        return new if out is None else out

    def _same(self, itp: Any, value: Any, new: Any, old: Any) -> bool:
        """Whether ``new`` is ``old`` but for the undeclared keys (its declared
        content unchanged)."""
        if new == old:
            return True
        if type(new) is not type(old) or type(new) not in (dict, list):
            return False
        probe = Carrier()
        return bool(probe.merge(itp, value, new, old) == old)

    def _pairs(
        self, itp: Any, values: list[Any], new: list[Any], old: list[Any], path: str
    ) -> dict[int, int]:
        """new index -> stored index of the same item (see the module's rules)."""
        n, m = len(new), len(old)
        pairs: dict[int, int] = {}
        used: set[int] = set()
        known = self.known
        if known:  # 0. the same object as loaded or written: the same item
            at = {id(item): j for j, item in enumerate(old)}
            for i, v in enumerate(values):
                entry = known.get(id(v))
                if entry is not None and entry[0] is v:
                    j = at.get(id(entry[1]))
                    if j is None:  # (the stored document read again: found by content)
                        j = next(
                            (k for k in range(m) if k not in used and old[k] == entry[1]), None
                        )
                    if j is not None and j not in used:
                        pairs[i] = j
                        used.add(j)
        for i in range(min(n, m)):  # 1. unchanged in place
            if i in pairs or i in used:
                continue
            if self._same(itp, values[i], new[i], old[i]):
                pairs[i] = i
                used.add(i)
        if len(pairs) < n and len(used) < m:  # 1. moved or shifted
            nxt = 0
            for i in range(n):
                if i in pairs:
                    nxt = pairs[i] + 1
                    continue
                order = [nxt] if nxt < m and nxt not in used else []
                for j in (*order, *range(m)):
                    if j not in used and self._same(itp, values[i], new[i], old[j]):
                        pairs[i] = j
                        used.add(j)
                        nxt = j + 1
                        break
        if len(pairs) == n or len(used) == m:
            return pairs
        anchors: list[tuple[int, int]] = [(-1, -1)]  # 2. the gaps between matched items
        for i in sorted(pairs):
            if pairs[i] > anchors[-1][1]:
                anchors.append((i, pairs[i]))
        anchors.append((n, m))
        for (i0, j0), (i1, j1) in itertools.pairwise(anchors):
            fresh = [i for i in range(i0 + 1, i1) if i not in pairs]
            stale = [j for j in range(j0 + 1, j1) if j not in used]
            if not fresh or not stale:
                continue  # inserted, or removed by the writer
            if len(fresh) == len(stale):
                for i, j in zip(fresh, stale, strict=True):
                    pairs[i] = j
                    used.add(j)
        fresh = [i for i in range(n) if i not in pairs]  # 3. what cannot be matched
        stale = [j for j in range(m) if j not in used]
        if fresh and stale and known:  # an item whose object left the state: removed
            present = {id(v) for v in values}
            gone = [doc for obj, doc in known.values() if id(obj) not in present]
            stale = [j for j in stale if not any(old[j] is d or old[j] == d for d in gone)]
        if (
            fresh
            and stale
            and any(self._extra_in(itp, values[i], new[i], old[j]) for i in fresh for j in stale)
        ):
            self.dropped.append(path or "(the state)")
        return pairs

    def _extra_in(self, itp: Any, value: Any, new: Any, old: Any) -> bool:
        """Whether ``old`` holds keys that carrying it onto ``new`` would add."""
        probe = Carrier()
        return probe.merge(itp, value, new, old) is not new or bool(probe.dropped)


#: id(list item object) -> (the object, its stored document): see :func:`known_items`
Known = dict[int, tuple[Any, Any]]


def known_items(tp: Any, value: Any, plain: Any, stored: Any) -> Known:
    """The list items of ``value`` whose stored document (in ``stored``, the document
    ``value`` was just validated from or written as, item for item) holds more than
    their own document (in ``plain``, ``value`` dumped): keys to carry. Kept by
    identity, so a later write finds each of them wherever the typed code moved it
    and however it edited it. Only the subtrees where ``stored`` differs from
    ``plain`` are walked (none, in a state without undeclared keys)."""
    known: Known = {}
    if stored is None or plain == stored:
        return known

    def visit(tp: Any, value: Any, plain: Any, stored: Any) -> None:
        if plain == stored or type(plain) is not type(stored):
            return
        if type(plain) is dict:
            shape = _model_shape(value, plain) if value is not _MISSING else None
            rtp = _resolve(tp, value, plain) if shape is None else None
            if shape is None and rtp is not None and is_typeddict(rtp):
                shape = _typeddict_shape(rtp, value)
            if shape is not None:
                for key, (ftp, fvalue) in shape.fields.items():
                    if key in plain and key in stored:
                        visit(ftp, fvalue, plain[key], stored[key])
            elif rtp is not None and get_origin(rtp) in _MAPPINGS and len(get_args(rtp)) == 2:
                values = value if isinstance(value, Mapping) else {}
                for key, sub in plain.items():
                    if key in stored:
                        visit(get_args(rtp)[1], values.get(key, _MISSING), sub, stored[key])
        elif type(plain) is list and len(plain) == len(stored):
            rtp = _resolve(tp, value, plain)
            args = get_args(rtp) if rtp is not None else ()
            if rtp is None or get_origin(rtp) not in _SEQUENCES or not args:
                return
            fixed = get_origin(rtp) is tuple and not (len(args) == 2 and args[1] is Ellipsis)
            for i, item in enumerate(_items(value, len(plain))):
                itp = (args[i] if i < len(args) else Any) if fixed else args[0]
                if plain[i] != stored[i]:
                    if item is not _MISSING and not isinstance(item, _ATOMS):
                        known[id(item)] = (item, stored[i])
                    visit(itp, item, plain[i], stored[i])

    visit(tp, value, plain, stored)
    return known


_ATOMS = (str, int, float, bool, type(None))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copy(value: Any) -> Any:
    from .registry import copy_document

    return copy_document(value)


def _items(value: Any, n: int) -> list[Any]:
    if isinstance(value, (list, tuple)) and len(value) == n:
        return list(value)
    return [_MISSING] * n


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
