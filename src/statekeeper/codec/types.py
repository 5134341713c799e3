"""Typed values in agent documents: tagging on write, rebuilding on read.

An agent document is JSON-like (dicts with string keys, lists, strings, 64-bit
integers, finite floats, booleans, None). Values of a few more types are stored as
*tagged values*, a dict whose first key is ``"$t"``::

    datetime (tz-aware)   {"$t": "datetime", "v": "2025-01-31T12:00:00+00:00"}
                          (+ "z": "Europe/Paris" when the tzinfo is a ZoneInfo)
    date / time           {"$t": "date", "v": "2025-01-31"}, {"$t": "time", "v": "12:00:00"}
    UUID                  {"$t": "uuid", "v": "4f6c…"}
    Decimal               {"$t": "decimal", "v": "1.10"}
    bytes                 {"$t": "bytes", "v": "<base64>"}  (native bin in msgpack)
    set / frozenset       {"$t": "set", "v": [...]}, {"$t": "frozenset", "v": [...]}
    registered types      {"$t": "<registered name>", "v": <fields / member name / …>}
    a user dict that has a "$t" key
                          {"$t": "dict", "v": {...the dict, untouched...}}

Loading rebuilds **only** these built-in tags and the types registered on the
:class:`TypeRegistry` of the codec: a stored name is looked up in the registry, never
imported, so stored data cannot make the loader run arbitrary code. An unknown tag is
an :class:`~statekeeper.errors.UnknownTypeTag`.

Anything else — an unregistered class, a dataclass or enum that was not registered,
a naive datetime (ambiguous: attach a timezone), a non-finite float — is refused
with a :class:`~statekeeper.errors.SerializationError` naming the path and the type,
before anything is written. Tuples are stored as lists (JSON has no tuple).

Both directions have a fast path: :func:`needs_tagging` finds out whether a document
is plain JSON in one pass over it, and a decoder only walks a document whose bytes
contain the tag key at all.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import math
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigurationError, SerializationError, UnknownTypeTag
from .serializer import _INT_MAX, _INT_MIN, _bad_text, format_path

__all__ = [
    "BUILTIN_TAGS",
    "TAG",
    "TypeRegistry",
    "from_plain",
    "needs_tagging",
    "shown",
    "to_plain",
]

#: the key that marks a tagged value
TAG = "$t"

#: tags the codec itself defines (a registered type may not use these names)
BUILTIN_TAGS = frozenset(
    {"datetime", "date", "time", "uuid", "decimal", "bytes", "set", "frozenset", "dict"}
)

_LEAVES = frozenset({str, int, float, bool, type(None)})
_SCALARS = frozenset({str, int, bool, type(None)})

T = TypeVar("T", bound=type)


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    cls: type
    kind: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


class TypeRegistry:
    """The types a codec may store and rebuild beyond plain JSON.

    Register enums, dataclasses, pydantic models, or any class with an explicit
    ``encode``/``decode`` pair. The stored name defaults to
    ``"<module>.<qualname>"``; pass ``name`` to keep stored data readable after a
    class moves::

        types = TypeRegistry()
        types.register(Priority)                    # an Enum: stored by member name
        types.register(ToolCall, name="tool_call")  # a dataclass: stored by fields
        types.register(Money, encode=str, decode=Money.parse)

    ``register`` returns the class, so it also works as a decorator
    (``@types.register``).
    """

    def __init__(self, types: Iterable[type] = ()) -> None:
        self._by_type: dict[type, _Entry] = {}
        self._by_name: dict[str, _Entry] = {}
        for cls in types:
            self.register(cls)

    def __repr__(self) -> str:
        return f"TypeRegistry({sorted(self._by_name)!r})"

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_type

    @property
    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._by_name)

    def register(
        self,
        cls: T,
        *,
        name: str | None = None,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> T:
        """Allow values of exactly ``cls`` (not its subclasses) to be stored and rebuilt.

        Enums are stored by member name, dataclasses by their fields (each field value
        is itself stored by these rules), pydantic models by ``model_dump()`` and
        rebuilt with ``model_validate``. Any other class needs ``encode`` (value →
        something storable) and ``decode`` (that → value).
        """
        if not isinstance(cls, type):
            raise ConfigurationError(f"register() needs a class, got {cls!r}")
        label = name if name is not None else f"{cls.__module__}.{cls.__qualname__}"
        if not isinstance(label, str) or not label:
            raise ConfigurationError("a registered type name must be a non-empty string")
        if label in BUILTIN_TAGS:
            raise ConfigurationError(
                f"{label!r} is a built-in tag; register {cls!r} as another name"
            )
        if cls in _BUILTIN_TYPES or cls in _LEAVES or cls in (dict, list, tuple):
            raise ConfigurationError(f"{cls.__qualname__} is handled by the codec already")
        if (encode is None) != (decode is None):
            raise ConfigurationError("give both encode and decode, or neither")
        if encode is not None and decode is not None:
            entry = _Entry(label, cls, "custom", encode, decode)
        elif issubclass(cls, enum.Enum):
            enum_cls: Any = cls
            entry = _Entry(label, cls, "enum", _enum_encode, lambda v: enum_cls[v])
        elif dataclasses.is_dataclass(cls):
            entry = _Entry(label, cls, "dataclass", _dataclass_encode, _dataclass_decoder(cls))
        elif hasattr(cls, "model_validate") and hasattr(cls, "model_dump"):
            model: Any = cls
            entry = _Entry(
                label, cls, "pydantic", lambda v: v.model_dump(mode="python"), model.model_validate
            )
        else:
            raise ConfigurationError(
                f"cannot register {cls.__qualname__}: not an Enum, dataclass or pydantic model;"
                " pass encode= and decode="
            )
        old = self._by_name.get(label)
        if old is not None and old.cls is not cls:
            raise ConfigurationError(f"name {label!r} is already registered for {old.cls!r}")
        previous = self._by_type.get(cls)
        if previous is not None and previous.name != label:
            del self._by_name[previous.name]
        self._by_type[cls] = entry
        self._by_name[label] = entry
        return cls

    def copy(self) -> TypeRegistry:
        """An independent registry with the same entries."""
        other = TypeRegistry()
        other._by_type = dict(self._by_type)
        other._by_name = dict(self._by_name)
        return other


def _enum_encode(value: Any) -> str:
    return str(value.name)


def _dataclass_encode(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _dataclass_decoder(cls: type) -> Callable[[Any], Any]:
    fields = dataclasses.fields(cls)
    init = {f.name for f in fields if f.init}
    rest = [f.name for f in fields if not f.init]

    def decode(value: Any) -> Any:
        if type(value) is not dict:
            raise TypeError(f"expected an object of fields, got {type(value).__name__}")
        obj = cls(**{k: v for k, v in value.items() if k in init})
        for k in rest:
            if k in value:
                object.__setattr__(obj, k, value[k])
        return obj

    return decode


_BUILTIN_TYPES = frozenset({datetime, date, time, uuid.UUID, Decimal, bytes, set, frozenset})


# -- the fast pass ----------------------------------------------------------------------


def needs_tagging(value: Any, *, strict_keys: bool = False) -> bool:
    """True when ``value`` is not plain JSON (so :func:`to_plain` must convert it, or
    refuse it with a precise error).

    Plain means: dicts, lists and tuples of str, int, float, bool and None, with finite
    floats and no dict that has a ``"$t"`` key. With ``strict_keys``, a dict key that is
    not exactly ``str`` also counts (for encoders that would accept it silently).
    One pass, no copy: this is the fast path of every write.
    """
    t = type(value)
    if t is dict:
        if TAG in value:
            return True
        if strict_keys:
            for k in value:
                if type(k) is not str:
                    return True
        children: Any = value.values()
    elif t is list or t is tuple:
        children = value
    elif t is float:
        return bool(value - value != 0.0)  # NaN or ±Infinity
    else:
        return t not in _LEAVES
    for child in children:
        tc = type(child)
        if tc in _SCALARS:
            continue
        if tc is dict or tc is list or tc is tuple:
            if needs_tagging(child, strict_keys=strict_keys):
                return True
        elif tc is float:
            if child - child != 0.0:
                return True
        else:
            return True
    return False


# -- writing --------------------------------------------------------------------------


def to_plain(
    value: Any,
    registry: TypeRegistry | None,
    root: str = "value",
    *,
    native_bytes: bool = False,
) -> Any:
    """A copy of ``value`` made of plain JSON types and tagged values.

    Raises :class:`SerializationError` naming the path of the first value that cannot
    be stored. With ``native_bytes``, ``bytes`` stay as they are (msgpack has a type
    for them).
    """
    return _Tagger(registry, native_bytes).convert(value, root, [])


def shown(value: Any, registry: TypeRegistry | None = None) -> Any:
    """``value`` (a loaded document, event info or ops) as JSON that names every value
    exactly: what an export file holds (:meth:`~statekeeper.codec.Codec.copy_dumps`) —
    a typed value as its tagged form (``{"$t": "decimal", "v": "1.10"}``, bytes as
    base64), a dict of the caller's with a ``"$t"`` key escaped. For what prints or
    serves a state as JSON: a JSON encoder given the values themselves refused a
    ``Decimal``, ``bytes`` or a set (the CLI's ``show``, ``history --json`` and ``diff``
    stopped with an internal error), or wrote a datetime or UUID as a plain string,
    bytes as a list of numbers, a tagged-looking dict as the value it looks like.
    ``value`` itself when it is plain JSON; a value the codec cannot tag (a type not in
    ``registry``) is left as it is."""
    if not needs_tagging(value):
        return value
    try:
        return to_plain(value, registry, "data")
    except SerializationError:
        return value


class _Tagger:
    __slots__ = ("native_bytes", "registry")

    def __init__(self, registry: TypeRegistry | None, native_bytes: bool) -> None:
        self.registry = registry
        self.native_bytes = native_bytes

    def fail(self, problem: str, root: str, parts: list[str | int]) -> SerializationError:
        return SerializationError(f"cannot serialize {problem}", format_path(root, parts))

    def convert(self, value: Any, root: str, parts: list[str | int]) -> Any:
        t = type(value)
        if t is str:
            if _bad_text(value):
                raise self.fail(f"string {value!r} is not valid Unicode", root, parts)
            return value
        if t is int:
            if not _INT_MIN <= value <= _INT_MAX:
                raise self.fail(f"integer {value} out of 64-bit range", root, parts)
            return value
        if t is bool or value is None:
            return value
        if t is float:
            if not math.isfinite(value):
                raise self.fail(f"non-finite float {value!r}", root, parts)
            return value
        if t is dict:
            out: dict[str, Any] = {}
            for key, child in value.items():
                if type(key) is not str:
                    raise self.fail(
                        f"dict key {key!r} of type {type(key).__name__} (keys must be str)",
                        root,
                        parts,
                    )
                if _bad_text(key):
                    raise self.fail(f"dict key {key!r} is not valid Unicode", root, parts)
                out[key] = self.convert(child, root, [*parts, key])
            if TAG in out:
                return {TAG: "dict", "v": out}
            return out
        if t is list or t is tuple:
            return [self.convert(child, root, [*parts, i]) for i, child in enumerate(value)]
        if t is datetime:
            if value.tzinfo is None or value.utcoffset() is None:
                raise self.fail(
                    f"naive datetime {value.isoformat()!r} (attach a timezone, e.g. UTC)",
                    root,
                    parts,
                )
            tagged: dict[str, Any] = {TAG: "datetime", "v": value.isoformat()}
            if isinstance(value.tzinfo, ZoneInfo):
                tagged["z"] = value.tzinfo.key
            return tagged
        if t is date:
            return {TAG: "date", "v": value.isoformat()}
        if t is time:
            if value.tzinfo is not None and value.utcoffset() is None:
                raise self.fail(f"time {value!r} with a timezone that has no offset", root, parts)
            return {TAG: "time", "v": value.isoformat()}
        if t is uuid.UUID:
            return {TAG: "uuid", "v": str(value)}
        if t is Decimal:
            return {TAG: "decimal", "v": str(value)}
        if t is bytes:
            if self.native_bytes:
                return value
            return {TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
        if t is set or t is frozenset:
            items = []
            for child in value:
                tc = type(child)
                if tc is tuple:
                    raise self.fail(
                        "a tuple inside a set (it would load as an unhashable list)",
                        root,
                        parts,
                    )
                items.append(self.convert(child, root, parts))  # no index: sets have no order
            return {TAG: "set" if t is set else "frozenset", "v": items}
        if getattr(t, "_plain_json", False):  # agent.data's tracked dict/list (store.tracked)
            plain = dict(dict.items(value)) if isinstance(value, dict) else list.copy(value)
            return self.convert(plain, root, parts)
        entry = self.registry._by_type.get(t) if self.registry is not None else None
        if entry is None:
            raise self.fail(
                f"type {t.__module__}.{t.__qualname__} (not registered with the codec)",
                root,
                parts,
            )
        try:
            encoded = entry.encode(value)
        except Exception as exc:
            raise self.fail(f"{entry.name} value: encode failed: {exc}", root, parts) from exc
        return {TAG: entry.name, "v": self.convert(encoded, root, parts)}


# -- reading --------------------------------------------------------------------------


def from_plain(value: Any, registry: TypeRegistry | None, root: str = "value") -> Any:
    """Rebuild the tagged values inside a freshly decoded document (modified in place).

    Raises :class:`UnknownTypeTag` for a type that is not registered and
    :class:`SerializationError` for a malformed tagged value.
    """
    return _Untagger(registry).rebuild(value, root, [])


class _Untagger:
    __slots__ = ("registry",)

    def __init__(self, registry: TypeRegistry | None) -> None:
        self.registry = registry

    def rebuild(self, value: Any, root: str, parts: list[str | int]) -> Any:
        t = type(value)
        if t is dict:
            if TAG in value:
                return self.tagged(value, root, parts)
            self.children(value, root, parts)
            return value
        if t is list:
            for i, child in enumerate(value):
                tc = type(child)
                if tc is dict or tc is list:
                    value[i] = self.rebuild(child, root, [*parts, i])
            return value
        return value

    def children(self, value: dict[str, Any], root: str, parts: list[str | int]) -> None:
        for key, child in value.items():
            tc = type(child)
            if tc is dict or tc is list:
                value[key] = self.rebuild(child, root, [*parts, key])

    def tagged(self, value: dict[str, Any], root: str, parts: list[str | int]) -> Any:
        tag = value[TAG]
        if type(tag) is not str or "v" not in value:
            raise SerializationError(f"malformed tagged value {value!r}", format_path(root, parts))
        raw = value["v"]
        try:
            if tag == "dict":
                if type(raw) is not dict:
                    raise TypeError("an escaped dict must hold an object")
                self.children(raw, root, parts)
                return raw
            if tag == "datetime":
                dt = datetime.fromisoformat(raw)
                if dt.tzinfo is None:
                    raise ValueError("naive datetime")
                zone = value.get("z")
                if zone is not None:  # the same wall time in the named zone, same offset
                    local = dt.replace(tzinfo=ZoneInfo(zone))
                    if local.utcoffset() != dt.utcoffset():
                        local = local.replace(fold=1)
                    if local.utcoffset() != dt.utcoffset():
                        raise ValueError(f"offset of {raw!r} does not match zone {zone!r}")
                    dt = local
                return dt
            if tag == "date":
                return date.fromisoformat(raw)
            if tag == "time":
                return time.fromisoformat(raw)
            if tag == "uuid":
                return uuid.UUID(raw)
            if tag == "decimal":
                if type(raw) is not str:
                    raise TypeError("a decimal is stored as a string")
                return Decimal(raw)
            if tag == "bytes":
                if type(raw) is bytes:
                    return raw
                return base64.b64decode(raw, validate=True)
            if tag == "set" or tag == "frozenset":
                if type(raw) is not list:
                    raise TypeError("a set is stored as a list")
                items = self.rebuild(raw, root, parts)
                return set(items) if tag == "set" else frozenset(items)
        except (
            TypeError,
            ValueError,
            InvalidOperation,
            binascii.Error,
            ZoneInfoNotFoundError,
        ) as exc:
            raise SerializationError(
                f"stored {tag} value cannot be loaded: {exc}", format_path(root, parts)
            ) from exc
        entry = self.registry._by_name.get(tag) if self.registry is not None else None
        if entry is None:
            raise UnknownTypeTag(tag, format_path(root, parts))
        inner = self.rebuild(raw, root, parts)
        try:
            return entry.decode(inner)
        except Exception as exc:
            raise SerializationError(
                f"stored {tag} value cannot be rebuilt: {type(exc).__name__}: {exc}",
                format_path(root, parts),
            ) from exc
