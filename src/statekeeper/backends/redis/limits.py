"""The largest write a Redis server takes, checked before it is sent.

Redis reads one argument of a command up to ``proto-max-bulk-len`` bytes (512 MB by
default, 1 MB at the least) and a whole request up to ``client-query-buffer-limit``
(1 GB). A write over either is not refused with an error: the server closes the
connection while the request is still being sent. The backend took that for a lost
connection and tried again for ``retry_timeout`` seconds, then raised a
:class:`~statekeeper.errors.BackendError` saying "Connection reset by peer" — a record
of 600 MB that a PostgreSQL or SQLite store holds (a restore, a ``move``) looked like
a network failure. :func:`oversize` refuses it at once, before anything is sent, with
:class:`~statekeeper.errors.StateTooLarge` naming the server's limit.

Writes whose arguments add up to :data:`SURELY_TAKEN` bytes or less (every save but
huge ones) cost one sum and no round trip; the first larger one reads the server's
limits (``CONFIG GET``; a server that denies it, or a cluster node that does not answer
it, is taken to have the defaults) and keeps them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from ...errors import StateTooLarge
from .client import Client

__all__ = ["DEFAULT_LIMITS", "SURELY_TAKEN", "oversize", "read_limits", "request_size"]

logger = logging.getLogger("statekeeper.backends.redis")

#: the least ``proto-max-bulk-len`` Redis accepts (``CONFIG SET`` refuses lower): a
#: write of this many bytes in all is taken by every server
SURELY_TAKEN = 1024 * 1024

#: ``(proto-max-bulk-len, client-query-buffer-limit)`` of a server that does not say
DEFAULT_LIMITS = (512 * 1024 * 1024, 1024 * 1024 * 1024)


def _value(reply: Any, name: str) -> int | None:
    if not isinstance(reply, dict):
        return None
    for key, value in reply.items():
        if isinstance(value, dict):  # a cluster: the reply of each node
            got = _value(value, name)
            if got is not None:
                return got
        elif (key.decode() if isinstance(key, bytes) else str(key)) == name:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def _len(arg: Any) -> int:
    return len(arg) if isinstance(arg, bytes | str | bytearray | memoryview) else 0


def request_size(args: Sequence[Any]) -> int:
    """The bytes of a write's arguments (str ones: ASCII numbers, counted as chars)."""
    try:
        return sum(map(len, args))
    except TypeError:  # (an int argument)
        return sum(map(_len, args))


async def read_limits(client: Client) -> tuple[int, int]:
    """``(proto-max-bulk-len, client-query-buffer-limit)`` of the server (the defaults
    where it does not say)."""
    bulk, request = DEFAULT_LIMITS
    try:
        got_bulk = _value(await client.config_get("proto-max-bulk-len"), "proto-max-bulk-len")
        got_request = _value(
            await client.config_get("client-query-buffer-limit"), "client-query-buffer-limit"
        )
    except RedisError as exc:  # CONFIG renamed or denied (ACL): assume the defaults
        logger.debug("cannot read the request limits of Redis (%s): assuming defaults", exc)
        return bulk, request
    return got_bulk or bulk, got_request or request


def oversize(agent_id: str, args: Sequence[Any], limits: tuple[int, int]) -> StateTooLarge | None:
    """The refusal of a write of ``args`` over the server's ``limits``, else None."""
    bulk, request = limits
    largest = max(map(_len, args))
    if largest > bulk:
        return StateTooLarge(agent_id, "record", largest, bulk, engine="Redis proto-max-bulk-len")
    total = request_size(args)
    if total > request:
        return StateTooLarge(
            agent_id, "write", total, request, engine="Redis client-query-buffer-limit"
        )
    return None
