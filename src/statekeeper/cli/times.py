"""Times typed on the command line (``show --at-time``, ``audit --since``, ``observe
--since/--until``): epoch seconds or ISO 8601, each meaning one moment or refused with
a usage error naming the value."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import typer

__all__ = ["parse_time"]


def parse_time(value: str, option: str = "--at-time") -> float:
    """Epoch seconds, or ISO 8601 (naive times are local); ``option`` names the flag
    in the error. A value that reads both ways (``20250131``: ISO 8601's basic date,
    and 20,250,131 epoch seconds, in 1970) and a naive local time that a DST change
    made happen twice or not at all are refused, naming the readings: each would be
    taken as one of them silently."""
    try:
        number: float | None = float(value)
    except ValueError:
        number = None
    try:
        dt: datetime | None = datetime.fromisoformat(value)
    except ValueError:
        dt = None
    if number is not None and math.isfinite(number):
        if dt is None:
            return number
        when = datetime.fromtimestamp(number, UTC).isoformat()
        raise typer.BadParameter(
            f"{value!r} is ambiguous: ISO 8601 {dt.isoformat()} or epoch seconds ({when});"
            f" write {dt.date().isoformat()} for the date, {value}.0 for epoch seconds",
            param_hint=f"'{option}'",
        )
    if dt is None:
        raise typer.BadParameter(
            f"{value!r} is not an ISO 8601 time (e.g. 2025-01-31T12:00:00Z) or epoch seconds",
            param_hint=f"'{option}'",
        )
    if dt.tzinfo is None:
        return _local_time(value, dt, option)
    return dt.timestamp()


def _local_time(value: str, dt: datetime, option: str) -> float:
    """``dt``, a naive time, on this machine's local clock; refused when the local
    clock showed it twice (the clocks went back) or never (they went forward)."""
    first, second = dt.replace(fold=0).timestamp(), dt.replace(fold=1).timestamp()
    if first == second:
        return first
    readings = sorted({first, second})
    shown = " or ".join(datetime.fromtimestamp(t).astimezone().isoformat() for t in readings)
    if all(datetime.fromtimestamp(t) == dt for t in readings):
        why = f"happened twice here (the clocks went back): {shown}"
    else:
        why = "never happened here (the clocks went forward)"
    raise typer.BadParameter(
        f"{value!r} is a local time that {why}; give it with its UTC offset"
        " (e.g. 2025-01-31T12:00:00+01:00) or in UTC (…Z)",
        param_hint=f"'{option}'",
    )
