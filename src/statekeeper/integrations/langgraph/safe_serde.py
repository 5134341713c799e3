"""Safe loading of ``$s`` cells: a LangGraph serializer that never imports a type
named in stored data and never calls one that is not allowed (:func:`safe_serializer`).
A part of the LangGraph value codec (see :mod:`.serde`)."""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Iterable
from typing import Any

import pydantic
import pydantic.v1
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

__all__ = ["KnownTypesSerializer", "safe_serializer"]


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
