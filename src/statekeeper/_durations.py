"""Durations as operators write them: ``90``, ``90s``, ``500ms``, ``15m``, ``1h30m``,
``30d``, ``2w``.

One grammar for every place that reads one (a retention policy's ``ttl``, ``langgraph
prune --ttl``, the inspector's ``active``/``idle``/``window`` filters, ``metrics record
--every/--for``); each caller turns ``None`` into its own typed error, naming its own
argument.
"""

from __future__ import annotations

import math
import re

__all__ = ["DURATION_EXAMPLES", "duration_text", "seconds_in"]

#: what an error message shows as the accepted forms
DURATION_EXAMPLES = "90s, 500ms, 15m, 1h30m, 12h, 30d or 2w"

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: a capital M that is not the M of "MS" (milliseconds): months, to many readers
_MONTHS = re.compile(r"M(?![sS])")
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d|w)")


def seconds_in(text: str | float) -> float | None:
    """The seconds ``text`` stands for (a bare number is seconds), or ``None`` when it
    is not a positive, finite duration.

    >>> seconds_in("1h30m"), seconds_in("500ms"), seconds_in(" 90 "), seconds_in(2)
    (5400.0, 0.5, 90.0, 2.0)
    >>> seconds_in("0s"), seconds_in("ten minutes"), seconds_in("-5"), seconds_in("inf")
    (None, None, None, None)

    Units are read in either case, except a capital ``M`` on its own: ``6M`` is six
    months to many (ISO 8601, date formats) and was read as six minutes — a retention
    ``ttl=6M`` then deleted every agent idle for six minutes. It is refused
    (``6m`` is minutes; months are written in days or weeks).

    >>> seconds_in("6M"), seconds_in("6m"), seconds_in("500MS"), seconds_in("2H")
    (None, 360.0, 0.5, 7200.0)
    """
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        if _MONTHS.search(text):
            return None
        value = text.strip().lower().replace(" ", "")
        try:
            seconds = float(value)
        except ValueError:
            parts = _PART.findall(value)
            if not parts or "".join(n + u for n, u in parts) != value:
                return None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    return seconds if seconds > 0 and math.isfinite(seconds) else None


def duration_text(seconds: float) -> str:
    """``seconds`` as a policy file writes it, in the largest unit that divides it:
    what :func:`seconds_in` reads back.

    >>> duration_text(2592000), duration_text(43200), duration_text(900), duration_text(1.5)
    ('30d', '12h', '15m', '1.5s')
    """
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
