"""How LangGraph values become statekeeper JSON, and back, without importing stray types.

A statekeeper state document is JSON, so every value LangGraph hands the saver (channel
values, pending writes, metadata) is *packed* into JSON first:

* plain JSON (``dict`` with ``str`` keys, ``list``, ``str``, 64-bit ``int``, finite
  ``float``, ``bool``, ``None``) is stored as it is — readable in the state document.
  A ``tuple`` becomes a list, exactly as LangGraph's own serializer does;
* a LangChain message of one of the core classes (``HumanMessage``, ``AIMessage``,
  their chunks, ``ToolMessage``…) becomes ``{"$m": [class name, fields]}``, fields
  equal to their default left out;
* anything else goes through LangGraph's serde protocol
  (``serde.dumps_typed(value) -> (type, bytes)``) and is stored as
  ``{"$s": [type, base64]}``;
* a user dict with a key starting with ``$`` is wrapped as ``{"$d": {...}}`` so it is
  never mistaken for one of these tags.

**Pooling.** Messages and serde blobs of at least ``pool_min`` bytes are stored once per
thread in the document's ``pool`` under a content hash and referenced as
``{"$p": key}``. A message written by a node (a pending write), then appended to the
``messages`` channel, then listed again at every later checkpoint is stored once. When
``add_messages`` gives that message its id after the write was stored, the channel holds
``{"$r": [key, id]}`` (the pooled message with that id): its content is still stored once.

**Safe loading.** Unpacking builds messages only from the fixed table of LangChain core
classes below (no import by name), and hands ``$s`` blobs to the serializer, which by
default is a :class:`JsonPlusSerializer` restricted to LangGraph's
``SAFE_MSGPACK_TYPES``, the types the user allows, and the data classes this process
has already imported (:func:`safe_serializer`): a type named in stored data is never
imported, and one that is not allowed is never called — the serializer returns its raw
fields instead, with a warning.

Over 600 lines because packing and unpacking are one format: the tags, the pool,
the message table and the safe serializer are read and written by the pair of
functions here, and a change to one side must be made to the other in the same place.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import hashlib
import math
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
import pydantic
import pydantic.v1
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

__all__ = [
    "MESSAGE_CLASSES",
    "Built",
    "KnownTypesSerializer",
    "Memo",
    "ValueCodec",
    "fresh_ref",
    "is_message",
    "pool_refs",
    "safe_serializer",
]

_MESSAGE_NAMES = (
    "AIMessage",
    "AIMessageChunk",
    "ChatMessage",
    "ChatMessageChunk",
    "FunctionMessage",
    "FunctionMessageChunk",
    "HumanMessage",
    "HumanMessageChunk",
    "RemoveMessage",
    "SystemMessage",
    "SystemMessageChunk",
    "ToolMessage",
    "ToolMessageChunk",
)

#: the only classes a ``$m`` cell can build, by name
MESSAGE_CLASSES: dict[str, type[Any]] = {
    name: getattr(lc_messages, name) for name in _MESSAGE_NAMES if hasattr(lc_messages, name)
}
_CLASS_NAMES: dict[type[Any], str] = {cls: name for name, cls in MESSAGE_CLASSES.items()}
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_SCALARS = (str, bool, type(None))
#: scalars a list keeps as they are stored (see :meth:`ValueCodec.pack_items`)
_KEPT = frozenset({str, bool, type(None), int})
#: stored message field values that unpack to themselves
_PLAIN = frozenset({str, bool, type(None), int, float})

#: ``id(message)`` -> (weak reference to the message, its packed reference, its
#: fingerprint when packed or loaded: see :func:`fingerprint`). Weak: the memo never
#: keeps a message alive (LangGraph holds a run's messages while it runs).
Memo = dict[int, tuple["weakref.ref[Any]", Any, "Fingerprint | Stored"]]
#: (field names, field values: immutable ones by reference, containers as JSON bytes)
Fingerprint = tuple[tuple[str, ...], tuple[Any, ...]]


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


def safe_serializer(
    allowed_types: Iterable[type[Any] | tuple[str, str]] = (),
    *,
    known_types: bool = True,
) -> JsonPlusSerializer:
    """A LangGraph serializer that constructs only known types when loading.

    ``JsonPlusSerializer`` is built with an explicit ``allowed_msgpack_modules``
    (never ``True``): LangGraph's ``SAFE_MSGPACK_TYPES`` (datetime, UUID, Decimal,
    LangChain messages, ``Send``, ``Interrupt``, ``Command``…) plus ``allowed_types``
    (classes or ``(module, name)`` pairs). With ``known_types`` (the default) a type
    named in stored data is also built when it is *already known to this process*:
    its module is already imported (nothing is ever imported on load) and the name is
    a dataclass, a pydantic model, an ``Enum`` or a ``NamedTuple`` class — so a
    graph's own state types round-trip, as with LangGraph's permissive default, while
    functions (``os.system``) and other classes (``subprocess.Popen``) are never
    called. Pickle and the legacy JSON constructor path stay off.
    """
    allowed: set[tuple[str, ...]] = set()
    for item in allowed_types:
        if isinstance(item, type):
            allowed.add((item.__module__, item.__qualname__))
        else:
            allowed.add(tuple(item))
    if known_types:
        return KnownTypesSerializer(allowed)
    return JsonPlusSerializer(
        pickle_fallback=False,
        allowed_json_modules=None,
        allowed_msgpack_modules=allowed or None,
    )


class _KnownTypes(set[tuple[str, ...]]):
    """An allowlist that also admits data classes already imported by this process."""

    def __contains__(self, key: object) -> bool:
        if super().__contains__(key):
            return True
        if not (isinstance(key, tuple) and len(key) == 2):
            return False
        module, name = key
        if not (isinstance(module, str) and isinstance(name, str)):
            return False
        loaded = sys.modules.get(module)  # never import: only what is already loaded
        if loaded is None:
            return False
        found: Any = loaded
        for part in name.split("."):
            found = loaded.__dict__.get(part) if found is loaded else getattr(found, part, None)
            if found is None:
                return False
        if not isinstance(found, type) or found.__module__ != module:
            return False
        if not _is_data_class(found):
            return False
        self.add(key)
        return True


def _is_data_class(cls: type[Any]) -> bool:
    if dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum):
        return True
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return True
    return issubclass(cls, pydantic.BaseModel) or issubclass(cls, pydantic.v1.BaseModel)


class KnownTypesSerializer(JsonPlusSerializer):
    """:func:`safe_serializer`'s serializer with ``known_types`` (see there)."""

    def __init__(self, allowed: Iterable[tuple[str, ...]] = ()) -> None:
        self._explicit = set(allowed)
        super().__init__(
            pickle_fallback=False,
            allowed_json_modules=None,
            allowed_msgpack_modules=self._explicit or None,
        )
        known = _KnownTypes(self._explicit)
        self._allowed_msgpack_modules = known
        self._unpack_ext_hook = _create_msgpack_ext_hook(known)

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> KnownTypesSerializer:
        """A copy that also allows ``extra_allowlist`` (LangGraph's ``with_allowlist``)."""
        extra = {
            (item.__module__, item.__qualname__) if isinstance(item, type) else tuple(item)
            for item in extra_allowlist
        }
        if extra <= self._explicit:
            return self
        return KnownTypesSerializer(self._explicit | extra)


def is_message(value: Any) -> bool:
    """Whether ``value`` is stored as a ``$m`` message cell."""
    return type(value) in _CLASS_NAMES


def _pool_key(blob: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.blake2b(blob, digest_size=12).digest()).decode()


class _Defaults:
    """Per message class: fields whose value equals the default are not stored."""

    def __init__(self) -> None:
        self._cache: dict[type[Any], dict[str, Any]] = {}

    def of(self, cls: type[Any]) -> dict[str, Any]:
        found = self._cache.get(cls)
        if found is None:
            found = {}
            for name, info in cls.model_fields.items():
                if not info.is_required():
                    found[name] = info.get_default(call_default_factory=True)
            self._cache[cls] = found
        return found


_DEFAULTS = _Defaults()


class ValueCodec:
    """Packs values into JSON cells and unpacks them (see the module docstring).

    Args:
        serde: LangGraph serializer for values that are not plain JSON or messages.
        native: store plain JSON and LangChain messages as JSON. With False every
            value is a serde blob (top-level lists are still split into elements).
        pool_min: smallest message / blob (bytes of its JSON cell) stored in the pool.
    """

    def __init__(
        self, serde: SerializerProtocol, *, native: bool = True, pool_min: int = 64
    ) -> None:
        self.serde = serde
        self.native = native
        self.pool_min = pool_min

    # -- packing -----------------------------------------------------------------

    def pack(
        self,
        value: Any,
        pool: Mapping[str, Any] | None = None,
        new: dict[str, Any] | None = None,
        memo: Memo | None = None,
        used: Memo | None = None,
    ) -> Any:
        """Pack ``value``; pooled cells not already in ``pool`` are added to ``new``.

        With ``new=None`` nothing is pooled (the cells are inlined). ``memo`` maps
        ``id(message)`` to ``(message, pooled reference, fields when packed)`` from
        earlier packs (or loads, see :meth:`unpack`): a message object met again whose
        fields are all still equal to those is not serialized again. A message whose
        only change is its ``id`` (``add_messages`` gives ids to the messages a node
        returned, after their write was stored) becomes ``{"$r": [key, id]}``: the
        stored message under ``key`` with that id, so its content is stored once.
        Every entry used or made is also put in ``used`` (and ``memo``).
        """
        if not self.native:
            if type(value) is list or type(value) is tuple:
                return [self._blob(v, pool, new) for v in value]
            return self._blob(value, pool, new)
        return self._pack(value, pool, new, memo, used)

    def pack_items(
        self,
        value: list[Any] | tuple[Any, ...],
        old: list[Any],
        pool: Mapping[str, Any],
        new: dict[str, Any],
        memo: Memo,
        used: Memo,
    ) -> tuple[list[Any], bool]:
        """Pack a list channel's value in one pass against ``old``, its packed form in
        the stored document, and the memo: an item at an index ``old`` has that is a
        message the memo knows, unchanged since it was packed and stored there as it
        is in the memo, is ``old``'s own cell (nothing serialized, nothing copied);
        every other item is packed as :meth:`pack` packs it. Returns the packed list
        and whether it is ``old`` followed by new items (the items of ``old`` are then
        the same objects, so the caller knows the change without comparing the lists).

        :meth:`pack` of a 400-message chat's list went through ``_pack``,
        ``_memo_message``, ``_changed`` and a fresh reference per message, then the
        caller compared the whole old and new lists (twice serialized) to find that
        two messages were appended; here the usual message costs a memo look-up, a
        reference comparison and one C-level comparison of its fields.
        """
        if not self.native:
            return self.pack(value, pool, new, memo, used), False
        out: list[Any] = []
        append = out.append
        lo = len(old)
        extends = len(value) >= lo
        get = memo.get
        names_of = _CLASS_NAMES
        for i, v in enumerate(value):
            if i < lo:
                if type(v) in names_of:
                    seen = get(id(v))
                    if seen is not None and seen[0]() is v:
                        cell = old[i]
                        if cell == seen[1]:
                            fp = seen[2]
                            d = getattr(v, "__dict__", None)
                            try:
                                if type(fp) is Stored:
                                    # built by a read from stored fields (a whole chat
                                    # but its newest messages): one C comparison with
                                    # what it was built with, no tuples made (see
                                    # Stored.unchanged; a false alarm goes the long way)
                                    expect = fp.expect
                                    same = d == (expect if expect is not None else fp.expected())
                                    if not same:
                                        fp = fp.fp or fp.resolve()
                                else:
                                    names, values = fp  # type: ignore[misc]
                                    same = (
                                        d is not None
                                        and len(d) == len(names)
                                        and tuple(d.values()) == values
                                        and tuple(d) == names
                                    )
                            except Exception:  # a field whose == raises: the long way
                                same = False
                                if type(fp) is Stored:
                                    fp = fp.fp or fp.resolve()
                            # a non-empty container field is frozen in the fingerprint:
                            # compared the long way
                            if same or _changed(v, fp) == set():  # type: ignore[arg-type]
                                used[id(v)] = seen
                                append(cell)
                                continue
                elif type(v) in _KEPT and type(old[i]) is type(v) and old[i] == v:
                    append(old[i])  # an immutable scalar stored as it is
                    continue
                packed = self._pack(v, pool, new, memo, used)
                if extends and packed is not old[i]:
                    extends = False
                append(packed)
            else:
                append(self._pack(v, pool, new, memo, used))
        return out, extends

    def _pack(
        self,
        v: Any,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
        memo: Memo | None = None,
        used: Memo | None = None,
    ) -> Any:
        t = type(v)
        if t in _SCALARS:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else self._blob(v, pool, new)
        if t is float:
            return v if math.isfinite(v) else self._blob(v, pool, new)
        if t is list or t is tuple:
            return [self._pack(x, pool, new, memo, used) for x in v]
        if t is dict:
            out: dict[str, Any] = {}
            escape = False
            for k, x in v.items():
                if type(k) is not str:
                    return self._blob(v, pool, new)
                if k[:1] == "$":
                    escape = True
                out[k] = self._pack(x, pool, new, memo, used)
            return {"$d": out} if escape else out
        name = _CLASS_NAMES.get(t)
        if name is not None:
            return self._memo_message(v, t, name, pool, new, memo, used)
        return self._blob(v, pool, new)

    def _memo_message(
        self,
        v: Any,
        t: type[Any],
        name: str,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
        memo: Memo | None,
        used: Memo | None,
    ) -> Any:
        if memo is not None and new is not None and pool is not None:
            seen = memo.get(id(v))
            if seen is not None and _alive(seen[0], v):
                base = _base_key(seen[1])
                inline = type(seen[1]) is dict and "$m" in seen[1]
                if inline or (base is not None and (base in pool or base in new)):
                    was = resolved(seen[2])
                    changed = _changed(v, was)
                    if changed is not None and not changed:
                        if used is not None:
                            used[id(v)] = seen
                        return fresh_ref(seen[1])
                    fp = fingerprint(v) if base is not None and changed == {"id"} else None
                    if fp is not None and _only_id_differs(was, fp):
                        entry = (weakref.ref(v), {"$r": [base, fp_id(fp)]}, fp)
                        memo[id(v)] = entry
                        if used is not None:
                            used[id(v)] = entry
                        return fresh_ref(entry[1])
        # fingerprint first: a field changed by another thread while we serialize
        # (add_messages setting an id) then shows as a change next time
        fp = fingerprint(v) if memo is not None and new is not None else None
        ref, dumped = self._message(v, t, name, pool, new)
        if memo is not None and dumped and fp is not None:
            entry = (weakref.ref(v), ref, fp)
            memo[id(v)] = entry
            if used is not None:
                used[id(v)] = entry
            return fresh_ref(ref)
        return ref

    def _message(
        self,
        v: Any,
        t: type[Any],
        name: str,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
    ) -> tuple[Any, bool]:
        try:
            data = v.model_dump()
        except Exception:  # a message that cannot dump itself: let serde try
            return self._blob(v, pool, new), False
        defaults = _DEFAULTS.of(t)
        fields = {
            k: self._pack(x, None, None)
            for k, x in data.items()
            if not (k in defaults and _same_default(x, defaults[k]))
        }
        return self._pooled({"$m": [name, fields]}, pool, new), True

    def _blob(self, v: Any, pool: Mapping[str, Any] | None, new: dict[str, Any] | None) -> Any:
        type_, data = self.serde.dumps_typed(v)
        return self._pooled({"$s": [type_, base64.b64encode(data).decode()]}, pool, new)

    def _pooled(
        self, cell: dict[str, Any], pool: Mapping[str, Any] | None, new: dict[str, Any] | None
    ) -> Any:
        if new is None:
            return cell
        blob = orjson.dumps(cell)
        if len(blob) < self.pool_min:
            return cell
        key = _pool_key(blob)
        if (pool is None or key not in pool) and key not in new:
            new[key] = cell
        return {"$p": key}

    # -- unpacking ---------------------------------------------------------------

    def unpack(
        self,
        packed: Any,
        pool: Mapping[str, Any],
        seen: Memo | None = None,
        built: Built | None = None,
    ) -> Any:
        """Rebuild a value (fresh objects every call) from its packed form.

        ``seen``: pooled messages built are registered there as :meth:`pack`'s memo
        entries, so packing the same objects again costs no serialization.
        ``built``: pooled messages built by earlier calls, by reference (see
        :meth:`_reuse`); the ones used are marked in ``built.used``.
        """
        t = type(packed)
        if t is list:
            if built is not None:  # a message list (the common channel): see _messages
                return self._messages(packed, pool, seen, built)
            return [self.unpack(x, pool, seen, built) for x in packed]
        if t is not dict:
            return packed
        if len(packed) == 1:
            tag, body = next(iter(packed.items()))
            if tag[:1] == "$":
                return self._tagged(tag, body, pool, seen, built)
        return {k: self.unpack(x, pool, seen, built) for k, x in packed.items()}

    def _tagged(
        self,
        tag: str,
        body: Any,
        pool: Mapping[str, Any],
        seen: Memo | None = None,
        built: Built | None = None,
    ) -> Any:
        if tag == "$p":
            if built is not None:
                return self._pooled_message(body, pool, seen, built)
            cell = pool[body]
            value = self.unpack(cell, pool)
            if seen is not None and "$m" in cell:
                _register(seen, value, {"$p": body})
            return value
        if tag == "$r":
            key, message_id = body
            cell = pool[key]["$m"]

            def make() -> Any:
                return self._stored_message(cell[0], {**cell[1], "id": message_id}, pool)

            ref = {"$r": [key, message_id]}
            if built is not None:
                return self._built_message(
                    f"{key} {message_id}", cell, message_id, ref, pool, seen, built
                )
            value = make()
            if seen is not None:
                _register(seen, value, ref)
            return value
        if tag == "$s":
            return self.serde.loads_typed((body[0], base64.b64decode(body[1])))
        if tag == "$m":
            return self._stored_message(body[0], body[1], pool)
        if tag == "$d":
            return {k: self.unpack(x, pool) for k, x in body.items()}
        raise ValueError(f"unknown packed tag {tag!r}")

    def _stored_message(self, name: str, fields: dict[str, Any], pool: Mapping[str, Any]) -> Any:
        """A message of class ``name`` from its stored ``fields`` (e.g. a pending write's,
        or a checkpoint's listed by ``list``): made without validation when they are all
        plain and :func:`_learn` knows its class and fields (see :meth:`_messages`)."""
        if _PLAIN.issuperset(map(type, fields.values())):
            made = _construct(name, fields)
            if made is not None:
                return made[0]
            value, valid = _make(name, fields)
            if valid:
                _fingerprint_built(value, fields, True)  # its class's template
                _learn(value, fields)
            return value
        return self._build(name, self.unpack(fields, pool))

    def _messages(
        self, packed: list[Any], pool: Mapping[str, Any], seen: Memo | None, built: Built
    ) -> list[Any]:
        """A packed list unpacked through ``built`` (see :meth:`_built_message`). A
        pooled message (``$p``, or ``$r``: with the id given it later) whose stored
        fields are all plain, of a class and fields :func:`_learn` knows, is made here
        in one loop (what :meth:`_built_message` does for it, inlined: a cold read of
        a 400-message chat made ~5 Python calls per message); one made before from
        the same stored fields is made again from them the same way, with its
        fingerprint kept: no check that the one made before is unchanged and no
        ``model_copy`` (a warm read of a 400-message chat: 12.8 M -> 10.0 M
        instructions), and what one read hands out shares no container with what
        another does."""
        out: list[Any] = []
        append = out.append
        cache = built.cache
        used = built.used
        recipes = built.recipes
        size = 0
        for x in packed:
            # made here before (by the branch below): its recipe, by its cache key,
            # without the pool cell, the class's entry or the field names looked up
            # again (a warm read of a 400-message chat: 7.88 M -> 5.96 M instructions,
            # benchmarks/bench_langgraph_read_window.py warm-latest)
            recipe = None
            if type(x) is dict:
                rkey: Any = x.get("$p")
                if rkey is None and "$r" in x:  # a pooled message given its id later
                    r = x["$r"]
                    rkey = f"{r[0]} {r[1]}"
                if type(rkey) is str:
                    recipe = recipes.get(rkey)
            if recipe is not None:
                cls, base, fields, empties, fields_set, extra, setters, kept, ref = recipe
                values = base.copy()
                values.update(fields)
                for field_name, kind in empties:
                    values[field_name] = kind()
                value = _new_object(cls)
                set_dict, set_fields, set_extra, set_private = setters
                set_dict(value, values)
                set_fields(value, set(fields_set))
                set_extra(value, {} if extra else None)
                set_private(value, None)
                used.add(rkey)
                if seen is not None:
                    seen[id(value)] = (_weak(value), ref, kept)
                append(value)
                continue
            if type(x) is not dict or len(x) != 1:
                append(self.unpack(x, pool, seen, built))
                continue
            if "$p" in x:
                key = ckey = x["$p"]
                mid = None
            elif "$r" in x:
                key, mid = x["$r"]
                ckey = f"{key} {mid}"
            else:
                append(self.unpack(x, pool, seen, built))
                continue
            cell = pool[key]
            body = cell.get("$m") if len(cell) == 1 else None
            if body is None:
                append(self.unpack(cell if mid is None else x, pool, seen, built))
                continue
            hit = cache.get(ckey)
            stored: Any = None
            if hit is None:
                fields = body[1] if mid is None else {**body[1], "id": mid}
                plain = _PLAIN.issuperset(map(type, fields.values()))
            else:  # made before from these stored fields: made again, not copied
                stored = hit[1]
                plain = type(stored) is Stored
                fields = stored.fields if plain else None
            direct = _DIRECT.get((MESSAGE_CLASSES[body[0]], tuple(fields))) if plain else None
            ref = {"$p": key} if mid is None else {"$r": [key, mid]}
            if direct is None:
                append(self._built_message(ckey, body, mid, ref, pool, seen, built))
                continue
            cls, base, empties, fields_set, extra, template, setters = direct
            values = base.copy()
            values.update(fields)
            for field_name, kind in empties:
                values[field_name] = kind()
            value = _new_object(cls)
            set_dict, set_fields, set_extra, set_private = setters
            set_dict(value, values)
            set_fields(value, set(fields_set))
            set_extra(value, {} if extra else None)
            set_private(value, None)
            if stored is None:
                content = fields.get("content")
                nbytes = _MESSAGE_OVERHEAD + (len(content) if type(content) is str else 0)
                stored = Stored(template, fields)
                cache[ckey] = (value, stored, nbytes)
                size += nbytes
            recipes[ckey] = (cls, base, fields, empties, fields_set, extra, setters, stored, ref)
            used.add(ckey)
            if seen is not None:
                seen[id(value)] = (_weak(value), ref, stored)
            append(value)
        built.nbytes += size
        return out

    def _pooled_message(
        self, key: str, pool: Mapping[str, Any], seen: Memo | None, built: Built
    ) -> Any:
        """A pooled cell (``{"$p": key}``) unpacked through ``built`` when it holds a
        message: :meth:`_reuse` without its closure, and the message built straight
        from its stored fields when they are all scalars (the usual chat message:
        nothing in them is packed, so unpacking them would copy the dict for nothing)."""
        cell = pool[key]
        body = cell.get("$m") if len(cell) == 1 else None
        if body is None:
            return self.unpack(cell, pool, seen, built)
        return self._built_message(key, body, None, {"$p": key}, pool, seen, built)

    def _built_message(
        self,
        key: str,
        body: list[Any],
        message_id: Any,
        ref: dict[str, Any],
        pool: Mapping[str, Any],
        seen: Memo | None,
        built: Built,
    ) -> Any:
        """A fresh (shallow) copy of the message built earlier for ``key`` (stored as
        ``body``, with ``message_id`` when not None: a ``$r`` reference), when that
        original is unchanged (its containers are shared with copies handed out, so a
        change made through one shows in its fingerprint); else a new build, handed
        out itself (a change made to it shows the same way: the next read builds
        again). A copy costs a third of a build and needs no new fingerprint. A
        message whose stored fields are all scalars (the usual chat message) is built
        straight from them (unpacking them would copy the dict for nothing), and its
        fingerprint is left to be worked out when needed (:class:`Stored`)."""
        hit = built.cache.get(key)
        if hit is None or not _unchanged(hit):
            fields = body[1]
            plain = True
            for x in fields.values():
                if type(x) not in _PLAIN:
                    fields = self.unpack(fields, pool)
                    plain = False
                    break
            if message_id is not None:
                plain = plain and type(message_id) in _PLAIN
                fields = {**fields, "id": message_id}
            made = _construct(body[0], fields) if plain else None
            if made is not None:
                value = made[0]
                content = fields.get("content")
                size = _MESSAGE_OVERHEAD + (len(content) if type(content) is str else 0)
                hit = built.put(key, value, Stored(made[1], fields), size)
            else:
                value, valid = _make(body[0], fields)
                hit = built.put(key, value, *_fingerprint_built(value, fields, plain))
                if valid and plain:
                    _learn(value, fields)
        else:
            value = hit[0].model_copy()
        built.used.add(key)
        if seen is not None:
            seen[id(value)] = (weakref.ref(value), ref, hit[1])
        return value

    @staticmethod
    def _build(name: str, fields: dict[str, Any]) -> Any:
        return _make(name, fields)[0]


def _make(name: str, fields: dict[str, Any]) -> tuple[Any, bool]:
    """The message of class ``name`` built from ``fields``, and whether its class
    validated them (else it is constructed from them as they are)."""
    cls = MESSAGE_CLASSES[name]  # KeyError for an unknown name: never imported
    try:
        return cls(**fields), True
    except Exception:
        return cls.model_construct(**fields), False


#: (class, stored field names) -> how messages of that class stored with those plain
#: fields are made without validating them again (see :func:`_learn`): (the
#: ``__dict__`` with every value that is not a stored field, the empty containers'
#: names and types, ``__pydantic_fields_set__``, whether ``__pydantic_extra__`` is a
#: dict, the class's fingerprint template, its attribute setters: see :func:`_slot_setters`)
_DIRECT: dict[tuple[type[Any], tuple[str, ...]], Any] = {}
_new_object = object.__new__
#: the attributes a message made by :func:`_construct` gets, as ``model_construct``
#: sets them (``__dict__`` and pydantic's three slots)
_MADE_ATTRS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")


def _slot_setters(cls: type[Any]) -> tuple[Callable[[Any, Any], None], ...] | None:
    """The ``__set__`` of the data descriptors that ``object.__setattr__(value, name,
    ...)`` calls for each of :data:`_MADE_ATTRS` on instances of ``cls`` (found as it
    finds them: the first class of the MRO that defines the name), bound once per
    class; None when one is not a data descriptor (such a class is not made
    directly). ``object.__setattr__`` looks the descriptor up and unpacks its
    arguments at every call: a cold read of the latest checkpoint of a 400-message
    chat made 30.18 M -> 29.37 M instructions, a warm one 8.77 M -> 7.95 M
    (``benchmarks/bench_langgraph_read_window.py``; docs/benchmarks.md, lgcold)."""
    setters: list[Callable[[Any, Any], None]] = []
    for name in _MADE_ATTRS:
        found = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        setter = getattr(type(found), "__set__", None)
        if found is None or setter is None:
            return None
        setters.append(found.__set__)
    return tuple(setters)


_weak = weakref.ref


def _learn(value: Any, fields: dict[str, Any]) -> None:
    """Note how ``value`` (validated from plain stored ``fields``) was made, when its
    class's :func:`_template` says each value it holds is a stored field (as stored),
    an empty container or a declared default: the next messages of its class stored
    with the same field names are then made by :func:`_construct` as
    ``model_construct`` does. Validating stored fields again changes nothing (they are
    ``model_dump()`` of a message that was validated), and was ~40 % of a cold read of
    a 400-message chat (``benchmarks/bench_langgraph_cold_callgrind.py``)."""
    cls = type(value)
    key = (cls, tuple(fields))
    if key in _DIRECT:
        return
    # worked out from this validated message itself (the one in _TEMPLATES may come
    # from a message its class did not validate)
    template = _template(value, fields, fingerprint(value))
    if template is None:
        return
    extra = getattr(value, "__pydantic_extra__", None)
    names = template[0]
    if (
        extra  # values kept beside the fields: not made here
        or getattr(value, "__pydantic_private__", None) is not None
        or getattr(cls, "__pydantic_post_init__", None)
        or not set(fields) <= set(names)
    ):
        return
    base: dict[str, Any] = {}
    empties: list[tuple[str, type[Any]]] = []
    for name, part in zip(names, template[1], strict=True):
        if part is _EMPTY_DICT or part is _EMPTY_LIST:
            empties.append((name, type(part)))
        base[name] = None if type(part) is _Field else part
    setters = _slot_setters(cls)
    if setters is None:
        return
    fields_set = frozenset(value.__pydantic_fields_set__)
    _DIRECT[key] = (cls, base, tuple(empties), fields_set, extra is not None, template, setters)


def _construct(name: str, fields: dict[str, Any]) -> tuple[Any, Any] | None:
    """A message of class ``name`` made from plain stored ``fields`` as :func:`_learn`
    noted (fresh empty containers, the stored values themselves), and its class's
    fingerprint template; None when nothing was noted for its class and fields."""
    cls = MESSAGE_CLASSES[name]  # KeyError for an unknown name: never imported
    direct = _DIRECT.get((cls, tuple(fields)))
    if direct is None:
        return None
    _, base, empties, fields_set, extra, template, setters = direct
    values = base.copy()
    values.update(fields)
    for field_name, kind in empties:
        values[field_name] = kind()
    value = _new_object(cls)
    set_dict, set_fields, set_extra, set_private = setters
    set_dict(value, values)
    set_fields(value, set(fields_set))
    set_extra(value, {} if extra else None)
    set_private(value, None)
    return value, template


def _fingerprint_built(
    value: Any, fields: dict[str, Any], plain: bool
) -> tuple[Fingerprint | Stored, int | None]:
    """The fingerprint of a message just built from stored ``fields`` (``plain``: all
    plain values, kept by the stored document, never changed), and its estimated
    size: a :class:`Stored` one (nothing computed) when its class has a template."""
    if plain:
        key = (type(value), tuple(fields))
        template = _TEMPLATES.get(key, _TEMPLATES)
        if template is not _TEMPLATES and template is not None:
            # the size estimate counts the content only (most of a chat message's
            # bytes): summing every field's length was ~6 % of a cold read's CPU
            content = fields.get("content")
            return Stored(template, fields), _MESSAGE_OVERHEAD + (
                len(content) if type(content) is str else 0
            )
        fp = fingerprint(value)
        if template is _TEMPLATES:
            _TEMPLATES[key] = _template(value, fields, fp)
        return fp, None
    return fingerprint(value), None


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


def fresh_ref(ref: Any) -> Any:
    """A copy of a memoized reference for the document: documents are patched in
    place, so a reference must never be shared between two places (or with the memo)."""
    if type(ref) is dict:
        if "$p" in ref:
            return {"$p": ref["$p"]}
        if "$r" in ref:
            return {"$r": list(ref["$r"])}
    return orjson.loads(orjson.dumps(ref))


def _base_key(ref: Any) -> str | None:
    """The pool key a message reference stands on."""
    if type(ref) is dict:
        if "$p" in ref:
            return str(ref["$p"])
        if "$r" in ref:
            return str(ref["$r"][0])
    return None


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


def pool_refs(packed: Any, found: set[str]) -> set[str]:
    """Collect every pool key referenced by a packed value into ``found``."""
    stack = [packed]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is list:
            stack.extend(node)
        elif t is dict:
            if len(node) == 1 and "$p" in node:
                found.add(node["$p"])
            elif len(node) == 1 and "$r" in node:
                found.add(node["$r"][0])
            elif len(node) == 1 and ("$s" in node or "$m" in node):
                continue
            else:
                stack.extend(node.values())
    return found
