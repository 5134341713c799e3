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
``messages`` channel, then listed again at every later checkpoint is stored once.

**Safe loading.** Unpacking builds messages only from the fixed table of LangChain core
classes below (no import by name), and hands ``$s`` blobs to the serializer, which by
default is a :class:`JsonPlusSerializer` restricted to LangGraph's
``SAFE_MSGPACK_TYPES`` plus the types the user allows (:func:`safe_serializer`): a
type named in stored data that is not allowed is never imported or called — the
serializer returns its raw fields instead, with a warning.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["MESSAGE_CLASSES", "ValueCodec", "pool_refs", "safe_serializer"]

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


def safe_serializer(
    allowed_types: Iterable[type[Any] | tuple[str, str]] = (),
) -> JsonPlusSerializer:
    """A LangGraph serializer that constructs only allow-listed types when loading.

    ``JsonPlusSerializer`` is built with an explicit ``allowed_msgpack_modules``
    (never ``True``): LangGraph's ``SAFE_MSGPACK_TYPES`` (datetime, UUID, Decimal,
    LangChain messages, ``Send``, ``Interrupt``, ``Command``…) plus ``allowed_types``
    (classes or ``(module, name)`` pairs, e.g. your state's dataclasses). Pickle and
    the legacy JSON constructor path stay off.
    """
    allowed: list[tuple[str, ...]] = []
    for item in allowed_types:
        if isinstance(item, type):
            allowed.append((item.__module__, item.__qualname__))
        else:
            allowed.append(tuple(item))
    return JsonPlusSerializer(
        pickle_fallback=False,
        allowed_json_modules=None,
        allowed_msgpack_modules=allowed or None,
    )


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
        memo: dict[int, tuple[Any, Any]] | None = None,
    ) -> Any:
        """Pack ``value``; pooled cells not already in ``pool`` are added to ``new``.

        With ``new=None`` nothing is pooled (the cells are inlined). ``memo`` maps
        ``id(message)`` to ``(message, pooled reference)`` from earlier packs: a message
        object met again is not serialized again (objects are treated as immutable
        once checkpointed); pass None to always serialize.
        """
        if not self.native:
            if type(value) is list or type(value) is tuple:
                return [self._blob(v, pool, new) for v in value]
            return self._blob(value, pool, new)
        return self._pack(value, pool, new, memo)

    def _pack(
        self,
        v: Any,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
        memo: dict[int, tuple[Any, Any]] | None = None,
    ) -> Any:
        t = type(v)
        if t in _SCALARS:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else self._blob(v, pool, new)
        if t is float:
            return v if math.isfinite(v) else self._blob(v, pool, new)
        if t is list or t is tuple:
            return [self._pack(x, pool, new, memo) for x in v]
        if t is dict:
            out: dict[str, Any] = {}
            escape = False
            for k, x in v.items():
                if type(k) is not str:
                    return self._blob(v, pool, new)
                if k[:1] == "$":
                    escape = True
                out[k] = self._pack(x, pool, new, memo)
            return {"$d": out} if escape else out
        name = _CLASS_NAMES.get(t)
        if name is not None:
            if memo is not None:
                seen = memo.get(id(v))
                if seen is not None and seen[0] is v:
                    ref = seen[1]
                    key = ref.get("$p") if type(ref) is dict else None
                    if (
                        key is not None
                        and pool is not None
                        and (key in pool or (new is not None and key in new))
                    ):
                        return ref
            ref = self._message(v, t, name, pool, new)
            if memo is not None and type(ref) is dict and "$p" in ref:
                memo[id(v)] = (v, ref)
            return ref
        return self._blob(v, pool, new)

    def _message(
        self,
        v: Any,
        t: type[Any],
        name: str,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
    ) -> Any:
        try:
            data = v.model_dump()
        except Exception:  # a message that cannot dump itself: let serde try
            return self._blob(v, pool, new)
        defaults = _DEFAULTS.of(t)
        fields = {
            k: self._pack(x, None, None)
            for k, x in data.items()
            if not (k in defaults and _same_default(x, defaults[k]))
        }
        return self._pooled({"$m": [name, fields]}, pool, new)

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

    def unpack(self, packed: Any, pool: Mapping[str, Any]) -> Any:
        """Rebuild a value (fresh objects every call) from its packed form."""
        t = type(packed)
        if t is list:
            return [self.unpack(x, pool) for x in packed]
        if t is not dict:
            return packed
        if len(packed) == 1:
            tag, body = next(iter(packed.items()))
            if tag[:1] == "$":
                return self._tagged(tag, body, pool)
        return {k: self.unpack(x, pool) for k, x in packed.items()}

    def _tagged(self, tag: str, body: Any, pool: Mapping[str, Any]) -> Any:
        if tag == "$p":
            return self.unpack(pool[body], pool)
        if tag == "$s":
            return self.serde.loads_typed((body[0], base64.b64decode(body[1])))
        if tag == "$m":
            cls = MESSAGE_CLASSES[body[0]]  # KeyError for an unknown name: never imported
            fields = self.unpack(body[1], pool)
            try:
                return cls(**fields)
            except Exception:
                return cls.model_construct(**fields)
        if tag == "$d":
            return {k: self.unpack(x, pool) for k, x in body.items()}
        raise ValueError(f"unknown packed tag {tag!r}")


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
            elif len(node) == 1 and ("$s" in node or "$m" in node):
                continue
            else:
                stack.extend(node.values())
    return found
