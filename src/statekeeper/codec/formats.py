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


def has_marker(body: bytes | bytearray | memoryview, marker: bytes, start: int = 0) -> bool:
    """``marker in body`` for a tag ``marker`` whose second byte is ``$`` (``b'"$t"'``,
    or ``b"\\xa2$t"`` packed), found from the ``$`` bytes: a ``$`` is found by
    ``memchr``, while ``in`` scans for the whole marker byte by byte — 87 us for a
    33 KB msgpack snapshot, where a float's bytes hold a ``0x24`` about one load in
    ten and each load checked its snapshot twice (measured, docs/benchmarks.md
    "load11"). Bodies with many ``$`` fall back to ``in`` after a few. ``start``: look
    in ``body[start:]`` only, without copying it (a stored record's body from 35).

    A ``bytearray`` is searched as ``bytes`` is; any other buffer (a ``memoryview``,
    whose ``in`` compares its items — ints — with the marker, so never found it: a
    body parsed from a view came back with its typed values as raw tag dicts) is
    copied to ``bytes`` first."""
    if type(body) is not bytes and type(body) is not bytearray:
        body = bytes(body)
    find = body.find
    at = find(b"$", start + 1)
    for _ in range(16):
        if at < 0:
            return False
        if body.startswith(marker, at - 1):
            return True
        at = find(b"$", at + 1)
    return find(marker, start) >= 0


#: ``ormsgpack.unpackb`` when it is installed (see :func:`fast_unpackb`); False: not
#: looked for yet
_FAST_UNPACKB: Any = False


def fast_unpackb() -> Any:
    """``ormsgpack.unpackb`` when it is installed (a core dependency; absent only where
    no wheel exists), else None: the parser of msgpack bodies, ``msgpack.unpackb``
    answering what it refuses.

    Measured on a 33 KB chat snapshot (100 messages of ~300 characters, CPU, best of
    7): 13 us against ``msgpack.unpackb``'s 21 us, ~12 % of a cold load at a snapshot
    (docs/benchmarks.md, "coldload"). A body it refuses is parsed again by ``msgpack``,
    which raises or answers as before (an ext type, which ``ormsgpack`` refuses without
    a hook, is msgpack's ``ExtType``). One difference is left: bytes after the first
    document are ignored where ``msgpack`` raises ``ExtraData``. The parse runs only on
    bytes whose checksum (or AEAD tag) was verified, so such bytes are never damage
    (a flipped or lost bit fails the checksum first); they can only be written by a
    writer that recomputes the checksum, which without a key can store any document
    anyway, and with a key cannot (docs/security.md)."""
    global _FAST_UNPACKB
    if _FAST_UNPACKB is False:
        try:
            import ormsgpack  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            _FAST_UNPACKB = None
        else:
            _FAST_UNPACKB = ormsgpack.unpackb
    return _FAST_UNPACKB


FORMATS = {"json": JSON, "msgpack": MSGPACK}
_NAMES = {v: k for k, v in FORMATS.items()}


def _locate(exc: Exception, value: Any, root: str) -> SerializationError:
    found = find_unserializable(value, root, text=True)
    if found is None:
        return SerializationError(f"cannot serialize: {exc}", root)
    return SerializationError(f"cannot serialize {found[1]}", found[0])


class Format:
    """One serialization format bound to a :class:`TypeRegistry`."""

    __slots__ = ("_fast", "_msgpack", "id", "marker", "name", "registry")

    def __init__(self, fmt: int, registry: TypeRegistry | None) -> None:
        if fmt not in _NAMES:
            raise SerializationError(f"unknown serialization format id {fmt}")
        self.id = fmt
        self.name = _NAMES[fmt]
        self.registry = registry
        self._msgpack: Any = None
        self._fast: Any = None
        if fmt == MSGPACK:
            try:
                import msgpack  # type: ignore[import-untyped]
            except ImportError as exc:  # pragma: no cover - depends on the environment
                from ..errors import BackendUnavailable

                raise BackendUnavailable(
                    "the msgpack format needs the msgpack package: pip install msgpack"
                ) from exc
            self._msgpack = msgpack
            self._fast = fast_unpackb()
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

    def loads_plain(self, data: bytes | memoryview) -> Any:
        """Parse bytes made by :meth:`dumps` that hold no tagged value (the caller
        checked: no :attr:`marker` in them), as they are."""
        if self._msgpack is None:
            return orjson.loads(data)
        return self._unpackb(data)

    def _unpackb(self, data: bytes | memoryview) -> Any:
        fast = self._fast
        if fast is not None:
            try:
                return fast(data)
            except Exception:  # (msgpack raises its own error, or answers: an ext type)
                pass
        return self._msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)

    def loads(self, data: bytes, root: str = "value") -> Any:
        """Parse bytes made by :meth:`dumps`, rebuilding tagged values.

        Raises ``ValueError`` for bytes that are not this format, and
        :class:`SerializationError` for a tag that cannot be rebuilt.
        """
        doc = orjson.loads(data) if self._msgpack is None else self._unpackb(data)
        if has_marker(data, self.marker):  # (memchr: most documents have no "$")
            doc = from_plain(doc, self.registry, root)
        return doc
