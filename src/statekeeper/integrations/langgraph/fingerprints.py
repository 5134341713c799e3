"""What a message's fields held, cheap to keep and compare: its *fingerprint*
(:func:`fingerprint`) and which fields changed since (:func:`_changed`). A part of the
LangGraph value codec (see :mod:`.serde`): the memo of packed messages and the cache of
built ones (:mod:`.memo`) keep one per message, so that a message met again unchanged is
never serialized or built again."""

from __future__ import annotations

import copy
from typing import Any

import orjson

__all__ = ["Fingerprint", "fingerprint", "fp_id"]


#: (field names, field values: immutable ones by reference, containers as JSON bytes)
Fingerprint = tuple[tuple[str, ...], tuple[Any, ...]]


_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}


#: what a fingerprint holds for an empty container field: a private empty container,
#: never handed out nor changed (a tuple's is the list's, as JSON has no tuple). Most
#: message fields are empty containers: with these, the fields of an unchanged message
#: equal its fingerprint's values in one C-level tuple comparison (see :func:`_changed`)
_EMPTY_DICT: dict[str, Any] = {}


_EMPTY_LIST: list[Any] = []


_EMPTY: dict[type[Any], Any] = {dict: _EMPTY_DICT, list: _EMPTY_LIST, tuple: _EMPTY_LIST}


_SMALL: dict[bytes, bytes] = {}


def _frozen(x: Any) -> Any:
    """A container field's value as it is now, compactly (JSON bytes, small ones
    shared), or a deep copy when it is not JSON."""
    try:
        blob = orjson.dumps(x)
    except Exception:
        return copy.deepcopy(x)
    if len(blob) <= 16:
        return _SMALL.setdefault(blob, blob)
    return blob


def _only_id_differs(old: Fingerprint, new: Fingerprint) -> bool:
    """Whether two fingerprints of a message differ in nothing but a (string) id."""
    if old[0] is not new[0] and old[0] != new[0]:
        return False
    at = new[0].index("id") if "id" in new[0] else -1
    if at < 0 or not isinstance(new[1][at], str):
        return False
    return all(
        i == at or a is b or (type(a) is type(b) and a == b)
        for i, (a, b) in enumerate(zip(old[1], new[1], strict=True))
    )


def fp_id(fp: Fingerprint) -> Any:
    """The ``id`` field recorded in a fingerprint."""
    return fp[1][fp[0].index("id")]


def fingerprint(v: Any) -> Fingerprint:
    """What a message's fields are now, cheap to keep and to compare: immutable values
    by reference, containers (which nodes could change in place) frozen (an empty one
    as its constant JSON bytes, without a dump: most message fields are empty), and any
    other object (a dataclass or a set in a ``ToolMessage.artifact``, a dict subclass)
    as a deep copy, compared by ``==``: kept by reference, it was compared with itself,
    and a change made in place was never seen."""
    fields = v.__dict__
    names = tuple(fields)
    names = _KEYS.setdefault(names, names)
    return names, tuple(
        x
        if type(x) in _IMMUTABLE
        else (_EMPTY[type(x)] if not x else _frozen(x))
        if type(x) in _EMPTY
        else _copied(x)
        for x in fields.values()
    )


#: field values kept by reference in a fingerprint: nothing can change them in place
_IMMUTABLE = frozenset({str, bool, type(None), int, float, bytes})


class _Uncopyable:
    """Stands for a field value that cannot be deep-copied: equal to nothing, so the
    message counts as changed (packed again) every time."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def _copied(x: Any) -> Any:
    try:
        return copy.deepcopy(x)
    except Exception:
        return _Uncopyable()


def _changed(v: Any, fp: Fingerprint) -> set[str] | None:
    """The fields of message ``v`` that differ from its fingerprint ``fp``; None when
    its field set itself differs."""
    current = getattr(v, "__dict__", None)
    names, values = fp
    if current is None or len(current) != len(names):
        return None
    try:
        # the usual case, in C: every field the object recorded, an equal scalar, or
        # an empty container still empty (every put and every read compares each
        # message of the list: a 200-turn chat makes ~120k comparisons)
        if tuple(current.values()) == values and tuple(current) == names:
            return set()
    except Exception:  # a field whose == raises: compared one by one below
        pass
    changed: set[str] = set()
    for name, old, (key, now) in zip(names, values, current.items(), strict=True):
        if key != name:
            return None
        if now is old:
            continue
        if old is _EMPTY_DICT or old is _EMPTY_LIST:  # was an empty container
            if _EMPTY.get(type(now)) is not old or now:
                changed.add(name)
            continue
        try:
            if type(old) is bytes:  # a frozen container
                same = type(now) in (dict, list, tuple) and _frozen(now) == old
            else:
                same = type(now) not in (dict, list, tuple) and bool(now == old)
                if not same and type(now) in (dict, list, tuple):  # a deep-copied one
                    same = bool(now == old)
        except Exception:
            same = False
        if not same:
            changed.add(name)
    return changed


def _same_default(value: Any, default: Any) -> bool:
    return type(value) is type(default) and bool(value == default)
