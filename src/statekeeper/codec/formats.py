"""Serialization formats: JSON (orjson, the default) and MessagePack.

A format turns a document into bytes and back. Values beyond plain JSON are tagged
first (:mod:`statekeeper.codec.types`), so both formats store exactly the same
documents and a store can hold records of both (each record names its format).

Policy, identical in both formats: dict keys are ``str``; integers fit 64 bits
(signed, or unsigned up to 2**64-1); floats are finite — NaN and ±Infinity are
**refused** with a :class:`~statekeeper.errors.SerializationError` (JSON cannot spell
them, and silently writing ``null`` would change the value): store ``"NaN"`` or
``None`` explicitly. Tuples are stored as lists.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import SerializationError
from .serializer import find_unserializable
from .types import TypeRegistry, from_plain, needs_tagging, to_plain

__all__ = ["FORMATS", "JSON", "MSGPACK", "Format", "has_marker"]

JSON = 0
MSGPACK = 1


def has_marker(body: bytes, marker: bytes) -> bool:
    """``marker in body`` for a tag ``marker`` whose second byte is ``$`` (``b'"$t"'``,
    or ``b"\\xa2$t"`` packed), found from the ``$`` bytes: a ``$`` is found by
    ``memchr``, while ``in`` scans for the whole marker byte by byte — 87 us for a
    33 KB msgpack snapshot, where a float's bytes hold a ``0x24`` about one load in
    ten and each load checked its snapshot twice (measured, docs/benchmarks.md
    "load11"). Bodies with many ``$`` fall back to ``in`` after a few."""
    if type(body) is not bytes:
        return b"$" in body and marker in body
    find = body.find
    at = find(b"$", 1)
    for _ in range(16):
        if at < 0:
            return False
        if body.startswith(marker, at - 1):
            return True
        at = find(b"$", at + 1)
    return marker in body


FORMATS = {"json": JSON, "msgpack": MSGPACK}
_NAMES = {v: k for k, v in FORMATS.items()}


def _locate(exc: Exception, value: Any, root: str) -> SerializationError:
    found = find_unserializable(value, root, text=True)
    if found is None:
        return SerializationError(f"cannot serialize: {exc}", root)
    return SerializationError(f"cannot serialize {found[1]}", found[0])


class Format:
    """One serialization format bound to a :class:`TypeRegistry`."""

    __slots__ = ("_msgpack", "id", "marker", "name", "registry")

    def __init__(self, fmt: int, registry: TypeRegistry | None) -> None:
        if fmt not in _NAMES:
            raise SerializationError(f"unknown serialization format id {fmt}")
        self.id = fmt
        self.name = _NAMES[fmt]
        self.registry = registry
        self._msgpack: Any = None
        if fmt == MSGPACK:
            try:
                import msgpack  # type: ignore[import-untyped]
            except ImportError as exc:  # pragma: no cover - depends on the environment
                from ..errors import BackendUnavailable

                raise BackendUnavailable(
                    "the msgpack format needs the msgpack package: pip install msgpack"
                ) from exc
            self._msgpack = msgpack
            self.marker = b"\xa2$t"  # "$t" as a msgpack fixstr
        else:
            self.marker = b'"$t"'

    def dumps(self, value: Any, root: str = "value") -> bytes:
        """Serialize a document; raises :class:`SerializationError` naming the path."""
        msgpack = self._msgpack
        try:
            if needs_tagging(value, strict_keys=msgpack is not None):
                value = to_plain(value, self.registry, root, native_bytes=msgpack is not None)
        except RecursionError:
            raise SerializationError(
                "cannot serialize: the document is nested too deeply", root
            ) from None
        if msgpack is None:
            try:
                return orjson.dumps(value)
            except (TypeError, orjson.JSONEncodeError) as exc:
                raise _locate(exc, value, root) from exc
        try:
            packed: bytes = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _locate(exc, value, root) from exc
        return packed

    def loads_plain(self, data: bytes) -> Any:
        """Parse bytes made by :meth:`dumps` that hold no tagged value (the caller
        checked: no :attr:`marker` in them), as they are."""
        if self._msgpack is None:
            return orjson.loads(data)
        return self._msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)

    def loads(self, data: bytes, root: str = "value") -> Any:
        """Parse bytes made by :meth:`dumps`, rebuilding tagged values.

        Raises ``ValueError`` for bytes that are not this format, and
        :class:`SerializationError` for a tag that cannot be rebuilt.
        """
        if self._msgpack is None:
            doc = orjson.loads(data)
        else:
            doc = self._msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
        if has_marker(data, self.marker):  # (memchr: most documents have no "$")
            doc = from_plain(doc, self.registry, root)
        return doc
