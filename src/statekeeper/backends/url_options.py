"""Backend URL query options (``?pool_max_size=4&retry_timeout=2.5``).

One parser for every engine that reads its own options out of its URL (PostgreSQL and
Redis): they are split from the driver's, and a bad number is an
:class:`~statekeeper.errors.InvalidArgument` whose ``argument`` is the option's name,
with the URL masked in the message.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import parse_qsl

from ..errors import InvalidArgument
from .redact import mask_url

__all__ = ["float_option", "int_option", "split_query"]

Pairs = list[tuple[str, str]]


def split_query(query: str, own: Collection[str]) -> tuple[Pairs, Pairs]:
    """The ``key=value`` pairs of a URL's ``query``, in order: statekeeper's ``own``
    options, and the rest (left in the URL for the driver)."""
    mine: Pairs = []
    keep: Pairs = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        (mine if key in own else keep).append((key, value))
    return mine, keep


def _refuse(key: str, value: str, url: str) -> InvalidArgument:
    return InvalidArgument(key, f"{key} must be a number, not {value!r}, in {mask_url(url)!r}")


def int_option(key: str, value: str, url: str) -> int:
    """The integer ``value`` of the URL option ``key`` (the engine checks its range)."""
    try:
        return int(value)
    except ValueError:
        raise _refuse(key, value, url) from None


def float_option(key: str, value: str, url: str, *, positive: bool = False) -> float:
    """The number ``value`` of the URL option ``key``: ``>= 0``, or ``> 0`` when
    ``positive`` (a timeout of zero would never connect)."""
    try:
        number = float(value)
    except ValueError:
        raise _refuse(key, value, url) from None
    if not (number > 0 if positive else number >= 0):
        raise _refuse(key, value, url)
    return number
