"""The group-commit batch's array parameters in PostgreSQL's binary array format.

``sk_append_batch`` takes 18 arrays. psycopg's generic list dumper works out each
list's element type anew on every call (it scans for the first non-``None`` item, finds
its dumper and, for ints, the smallest type that fits) and dumps item by item through
it: measured at ~140 µs of client CPU for a batch of 7 one-event appends, against
~20 µs for the same bytes built here from their fixed types (docs/benchmarks.md,
"lgpg12") — at 16 LangGraph threads the client's CPU is the bound. Each list is
wrapped in the class of its element type and psycopg dumps it with the matching dumper
of :data:`ADAPTERS` (the ``context`` of the backend's connections), as the array type
the statement casts it to.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

if TYPE_CHECKING:
    from ...records import AppendRequest

__all__ = ["ADAPTERS", "Bools", "Bytes", "Float8s", "Int4s", "Int8s", "Texts", "batch_params"]

_NULL = b"\xff\xff\xff\xff"
_HEADER = struct.Struct("!iiIii").pack  # ndim, has nulls, element oid, length, lower bound
_EMPTY = struct.Struct("!iiI").pack  # ndim 0
_LEN = struct.Struct("!i").pack
_INT8 = struct.Struct("!iq").pack
_INT4 = struct.Struct("!ii").pack
_FLOAT8 = struct.Struct("!id").pack
_BOOL = struct.Struct("!i?").pack


class Int8s(list[int | None]):
    """A ``bigint[]`` parameter."""


class Int4s(list[int | None]):
    """An ``int[]`` parameter."""


class Float8s(list[float | None]):
    """A ``float8[]`` parameter."""


class Bools(list[bool | None]):
    """A ``boolean[]`` parameter."""


class Bytes(list[bytes | None]):
    """A ``bytea[]`` parameter."""


class Texts(list[str | None]):
    """A ``text[]`` parameter (encoded in the connection's client encoding)."""


class _ArrayDumper(Dumper):
    """A one-dimensional array of items packed by ``pack(size, item)`` (``size`` 0:
    bytes-like items of their own length)."""

    format = Format.BINARY
    element_oid = 0
    pack: Callable[..., bytes] = staticmethod(_LEN)
    size = 0

    def dump(self, obj: Any) -> bytes:
        return self._dump(obj)

    def _dump(self, values: list[Any]) -> bytes:
        if not values:
            return _EMPTY(0, 0, self.element_oid)
        pack, size = self.pack, self.size
        parts = [b""]
        nulls = 0
        for value in values:
            if value is None:
                parts.append(_NULL)
                nulls = 1
            elif size:
                parts.append(pack(size, value))
            else:
                parts.append(pack(len(value)))
                parts.append(value)
        parts[0] = _HEADER(1, nulls, self.element_oid, len(values), 1)
        return b"".join(parts)


def _dumper(
    array_oid: int, element_oid: int, pack: Callable[..., bytes], size: int
) -> type[Dumper]:
    return type(
        f"Dumper{array_oid}",
        (_ArrayDumper,),
        {"oid": array_oid, "element_oid": element_oid, "pack": staticmethod(pack), "size": size},
    )


class _TextsDumper(_ArrayDumper):
    oid = 1009  # text[]
    element_oid = 25

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        conn = self.connection
        self._encoding = conn.info.encoding if conn is not None else "utf-8"

    def dump(self, obj: Any) -> bytes:
        encoding = self._encoding
        return self._dump([None if v is None else v.encode(encoding) for v in obj])


#: psycopg's adapters with the dumpers of this module's array classes
ADAPTERS = psycopg.adapt.AdaptersMap(psycopg.adapters)
ADAPTERS.register_dumper(Int8s, _dumper(1016, 20, _INT8, 8))
ADAPTERS.register_dumper(Int4s, _dumper(1007, 23, _INT4, 4))
ADAPTERS.register_dumper(Float8s, _dumper(1022, 701, _FLOAT8, 8))
ADAPTERS.register_dumper(Bools, _dumper(1000, 16, _BOOL, 1))
ADAPTERS.register_dumper(Bytes, _dumper(1001, 17, _LEN, 0))
ADAPTERS.register_dumper(Texts, _TextsDumper)


def batch_params(requests: Sequence[AppendRequest]) -> tuple[list[Any], ...]:
    """The parameters of ``sk_append_batch`` for ``requests`` (each list typed for
    this module's binary dumpers)."""
    snaps = [r.snapshot for r in requests]
    events = [e for r in requests for e in r.events]
    return (
        Texts([r.agent_id for r in requests]),
        Int8s([r.expected_seq for r in requests]),
        Int4s([len(r.events) for r in requests]),
        Texts([r.idempotency_key for r in requests]),
        Int8s([s.seq if s is not None else None for s in snaps]),
        Float8s([s.timestamp if s is not None else None for s in snaps]),
        Bytes([s.payload if s is not None else None for s in snaps]),
        Bytes([s.checksum if s is not None else None for s in snaps]),
        Int8s([e.seq for e in events]),
        Texts([e.type for e in events]),
        Float8s([e.timestamp for e in events]),
        Bytes([e.payload for e in events]),
        Bytes([e.checksum for e in events]),
        Bytes([r.head_tag for r in requests]),
        Bools([r.check_tag for r in requests]),
        Bytes([r.expected_tag for r in requests]),
        Texts([r.fence[0] if r.fence is not None else None for r in requests]),
        Int8s([r.fence[1] if r.fence is not None else None for r in requests]),
    )
