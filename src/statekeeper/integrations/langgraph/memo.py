"""What the LangGraph value codec (:mod:`.serde`) remembers of messages: the memo
of packed ones (:data:`Memo`, by ``id``), the fingerprint of a message built from stored
fields worked out only when asked (:class:`Stored`, with its class's template), and the
messages built for a thread's latest checkpoint (:class:`Built`)."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

from .fingerprints import (
    _EMPTY_DICT,
    _EMPTY_LIST,
    Fingerprint,
    _changed,
    _same_default,
    fingerprint,
)

__all__ = ["Built", "Memo", "Stored", "resolved"]


#: stored message field values that unpack to themselves
_PLAIN = frozenset({str, bool, type(None), int, float})


#: ``id(message)`` -> (weak reference to the message, its packed reference, its
#: fingerprint when packed or loaded: see :func:`fingerprint`). Weak: the memo never
#: keeps a message alive (LangGraph holds a run's messages while it runs).
Memo = dict[int, tuple["weakref.ref[Any]", Any, "Fingerprint | Stored"]]


class Stored:
    """The fingerprint of a message built from stored plain fields, worked out only
    when asked (:meth:`resolve`): what the message held when it was built is known
    from those fields and its class's :func:`_template`, so a read that is not
    followed by a put or another read of the message never computes it (a cold read
    of a 400-message chat built 400 fingerprints it never used)."""

    __slots__ = ("expect", "fields", "fp", "template")

    def __init__(self, template: tuple[tuple[str, ...], tuple[Any, ...]], fields: dict[str, Any]):
        self.template = template
        self.fields = fields
        #: the fingerprint once worked out: every put of the thread compares each of its
        #: messages with it, so working it out again each time made the writes of a
        #: 200-turn chat ~29 % more CPU in the saver (39k resolutions instead of 400)
        self.fp: Fingerprint | None = None
        #: the message's ``__dict__`` as built (see :meth:`unchanged`), once asked
        self.expect: dict[str, Any] | None = None

    def unchanged(self, v: Any) -> bool:
        """Whether message ``v`` (built from these fields) holds exactly what it was
        built with: one dict comparison (C) instead of :func:`_changed`'s field loop.
        Empty containers compare as fresh empty ones; False may be a false alarm (a
        tuple field compared with a list: the caller then asks :func:`_changed`)."""
        expect = self.expect
        if expect is None:
            expect = self.expected()
        return bool(getattr(v, "__dict__", None) == expect)

    def expected(self) -> dict[str, Any]:
        """The ``__dict__`` of a message built from these fields (worked out once)."""
        expect = self.expect
        if expect is None:
            names, parts = self.template
            fields = self.fields
            expect = self.expect = {
                name: fields[name]
                if type(part) is _Field
                else (_FRESH[part]() if type(part) is bytes else part)
                for name, part in zip(names, parts, strict=True)
            }
        return expect

    def resolve(self) -> Fingerprint:
        fp = self.fp
        if fp is None:
            names, parts = self.template
            fields = self.fields
            fp = self.fp = names, tuple([fields[p.name] if type(p) is _Field else p for p in parts])
        return fp


#: an empty container's frozen bytes -> a new empty container of its usual type
_FRESH: dict[bytes, Callable[[], Any]] = {b"{}": dict, b"[]": list}


class _Field:
    """A template's slot for a stored field's value (see :func:`_template`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


#: (class, stored field names) -> the fingerprint template of messages built from such
#: fields, or None when one cannot be made (see :func:`_template`)
_TEMPLATES: dict[tuple[type[Any], tuple[str, ...]], Any] = {}


def _template(value: Any, fields: dict[str, Any], fp: Fingerprint) -> Any:
    """The fingerprint template of messages of ``value``'s class built from plain
    fields named as ``fields`` are, from ``value`` (built from ``fields``) and its
    fingerprint ``fp``: each field the message holds is either a stored field's value
    (as stored), an empty container (its constant bytes) or the default its class
    declares (a scalar). None when a value is neither (a validator
    derived it from the fields, or changed a stored value): such messages keep
    computing their fingerprint when built."""
    declared = getattr(type(value), "model_fields", {})
    parts: list[Any] = []
    for name, held in zip(fp[0], fp[1], strict=True):
        empty = held is _EMPTY_DICT or held is _EMPTY_LIST
        if name in fields:
            stored = fields[name]
            if empty or (
                held is not stored and not (type(held) is type(stored) and held == stored)
            ):
                return None
            parts.append(_Field(name))
        elif empty:  # an empty container
            parts.append(held)
        elif (
            name in declared
            and type(held) in _PLAIN
            and _same_default(held, declared[name].default)
        ):
            parts.append(held)  # the class's declared default (e.g. ``type="ai"``)
        else:
            return None
    return fp[0], tuple(parts)


def resolved(fp: Fingerprint | Stored) -> Fingerprint:
    """``fp`` itself, or the fingerprint a :class:`Stored` stands for."""
    return fp.resolve() if type(fp) is Stored else fp  # type: ignore[return-value]


@dataclasses.dataclass(eq=False)
class Built:
    """Messages a saver built for a thread's latest checkpoint (by their stored
    reference), kept privately so the next read hands out copies instead of building
    them again; ``used`` collects the keys one read used."""

    cache: dict[str, tuple[Any, Fingerprint | Stored, int]] = dataclasses.field(
        default_factory=dict
    )
    used: set[str] = dataclasses.field(default_factory=set)
    #: estimated bytes held by ``cache`` (see :func:`_estimate`)
    nbytes: int = 0
    #: key -> how :meth:`ValueCodec._messages` makes the message of ``cache[key]``
    #: again (its class's :data:`_DIRECT` entry, its stored fields, its fingerprint
    #: and memo reference): only for a ``cache`` entry that ``_messages`` made
    recipes: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)

    def put(
        self, key: str, original: Any, fp: Fingerprint | Stored, nbytes: int | None = None
    ) -> tuple[Any, Fingerprint | Stored, int]:
        old = self.cache.get(key)
        if old is not None:
            self.nbytes -= old[2]
            self.recipes.pop(key, None)  # made another way now
        hit = (original, fp, _estimate(fp) if nbytes is None else nbytes)
        self.cache[key] = hit
        self.nbytes += hit[2]
        return hit

    def keep_used(self) -> None:
        """Drop what the last read did not use (the cache stays the size of one state)."""
        if len(self.used) < len(self.cache):
            self.cache = {k: self.cache[k] for k in self.used}
            self.nbytes = sum(hit[2] for hit in self.cache.values())
            recipes = self.recipes
            self.recipes = {k: recipes[k] for k in self.used if k in recipes}
        self.used = set()


#: rough bytes of a built message besides its field values (object, dicts, cache slot)
_MESSAGE_OVERHEAD = 1024


def _estimate(fp: Fingerprint | Stored) -> int:
    """Approximate bytes a built message holds: its string and frozen (JSON bytes)
    field values plus a fixed overhead; cheap (no traversal of the object)."""
    values = fp.fields.values() if type(fp) is Stored else fp[1]  # type: ignore[index]
    return _MESSAGE_OVERHEAD + sum([len(x) for x in values if type(x) in _SIZED])


_SIZED = (str, bytes)


def _unchanged(hit: tuple[Any, Fingerprint | Stored, int]) -> bool:
    """Whether a built message still holds what its fingerprint says (see
    :meth:`Stored.unchanged`, then :func:`_changed`)."""
    fp = hit[1]
    if type(fp) is Stored and fp.unchanged(hit[0]):
        return True
    return _changed(hit[0], resolved(fp)) == set()


def _alive(ref: weakref.ref[Any], v: object) -> bool:
    """Whether a memo entry's weak reference is (still) to ``v``."""
    return ref() is v


def _register(seen: Memo, value: Any, ref: dict[str, Any]) -> None:
    seen[id(value)] = (weakref.ref(value), ref, fingerprint(value))
