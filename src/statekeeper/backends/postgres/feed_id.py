"""The change feed's id on PostgreSQL (:meth:`Backend.feed_id`): a row of the store-level
markers table, ``sk_markers`` (set once, never updated: rows only ever added), named
``feed-id:<generation>:<id>``. The newest generation is the feed's id; a renewal (a
restore) adds the next generation. Made and renewed under a transaction-scoped advisory
lock of the schema, so two processes making the first one agree on it."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import psycopg

from ...errors import AccessDenied

if TYPE_CHECKING:
    from .part import PostgresPart

__all__ = ["feed_id", "renew_feed_id"]

_PREFIX = "feed-id:"


def _parse(rows: list[Any]) -> tuple[int, str] | None:
    if not rows:
        return None
    _, generation, found = str(rows[0][0]).split(":")
    return int(generation), found


async def _read(backend: PostgresPart) -> tuple[int, str] | None:
    return _parse(await backend._primary_query("feed_id_read", (_PREFIX + "%",)))


async def _make(backend: PostgresPart, renew: bool) -> str:
    fresh = secrets.token_hex(8)

    async def op() -> str:
        async with backend._connection() as conn, conn.transaction():
            await conn.execute(backend._sql["feed_id_lock"], (f"sk-feed-id:{backend.schema}",))
            cur = await conn.execute(backend._sql["feed_id_read"], (_PREFIX + "%",))
            now = _parse(list(await cur.fetchall()))
            if now is not None and not renew:
                return now[1]
            generation = 0 if now is None else now[0] + 1
            name = f"{_PREFIX}{generation:010d}:{fresh}"
            await conn.execute(backend._sql["marker_set"], (name,))
            return fresh

    found: str = await backend._retrying("feed_id", op)
    backend._wrote()
    return found


async def feed_id(backend: PostgresPart) -> str | None:
    """The newest generation's id, made by the first call; None for a role that may
    not add one (row security: a read-only role on a store whose feed has none yet)."""
    backend._check_open()
    now = await _read(backend)
    if now is not None:
        return now[1]
    if backend.readonly:
        return None
    try:
        return await _make(backend, False)
    except (psycopg.errors.InsufficientPrivilege, AccessDenied):
        return None


async def renew_feed_id(backend: PostgresPart) -> str:
    backend._check_writable()
    backend._check_open()
    return await _make(backend, True)
