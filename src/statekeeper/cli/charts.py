"""Terminal pictures: horizontal bars, a state timeline, and byte/duration formats.

Everything here is sized from the console width so that it reads at 80 columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ._markup import escape, escape_id
from ._table import titled_table

if TYPE_CHECKING:
    from rich.table import Table

    from ..records import Event

__all__ = [
    "duration",
    "hbar",
    "human_bytes",
    "sizes_table",
    "state_bars",
    "state_colour",
    "timeline_table",
]

_EIGHTHS = " ▏▎▍▌▋▊▉"

_COLOURS = {
    "completed": "green",
    "error": "red",
    "tool_call": "magenta",
    "processing": "cyan",
    "waiting": "yellow",
    "idle": "white",
}


def state_colour(state: str | None) -> str:
    """The colour a state is drawn in (white for states the default machine lacks)."""
    return _COLOURS.get(state or "", "white")


def hbar(fraction: float, width: int) -> str:
    """A bar ``width`` cells wide at most, filled to ``fraction`` in eighths of a cell."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    if not text and fraction > 0:
        text = "▏"  # something, however small, is never drawn as nothing
    return text


def human_bytes(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``…"""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def duration(seconds: float) -> str:
    """``850 ms``, ``12.3 s``, ``4m 05s``, ``2h 03m``, ``3d 04h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def state_bars(counts: dict[str, int], width: int) -> Table:
    """One row per state: name, count, share and a bar scaled to the largest count."""
    total = sum(counts.values()) or 1
    largest = max(counts.values(), default=1) or 1
    names = [escape(s) for s in counts]
    name_w = max(5, *(len(n) for n in names)) if names else 5
    count_w = max(6, len(f"{largest:,}"))
    bar_w = max(10, width - name_w - count_w - 12)  # paddings, box edges
    table = titled_table("Agents by state")
    table.add_column("state", no_wrap=True, width=name_w)
    table.add_column("agents", justify="right", no_wrap=True, width=count_w)
    table.add_column("share", justify="right", no_wrap=True, width=5)
    table.add_column("", no_wrap=True, width=bar_w)
    for state, n in counts.items():
        colour = state_colour(state if state != "-" else None)
        table.add_row(
            f"[{colour}]{escape(state)}[/]",
            f"{n:,}",
            f"{100 * n / total:.0f}%",
            f"[{colour}]{hbar(n / largest, bar_w - 1)}[/]",
        )
    return table


def sizes_table(rows: list[dict[str, object]], width: int) -> Table:
    """The largest agents: id, events, stored bytes and a bar scaled to the largest."""

    largest = max((int(str(r["bytes"])) for r in rows), default=1) or 1
    id_w = min(max((len(str(r["agent_id"])) for r in rows), default=5), width // 3)
    bar_w = max(10, width - id_w - 24)
    table = titled_table(f"Largest {len(rows)} agent(s), stored bytes (events + latest snapshot)")
    table.add_column("agent", overflow="fold", max_width=id_w)
    table.add_column("events", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, width=bar_w)
    for r in rows:
        size = int(str(r["bytes"]))
        table.add_row(
            escape_id(str(r["agent_id"])),
            f"{int(str(r['events'])):,}",
            human_bytes(size),
            f"[blue]{hbar(size / largest, bar_w)}[/]",
        )
    return table


def _stays(events: Sequence[Event], end: float) -> list[tuple[int, str, float, float]]:
    """``(seq, state, entered, left)`` for every stay in a state, the last one open
    until ``end``."""
    stays: list[tuple[int, str, float, float]] = []
    for ev in events:
        if ev.fsm_state is None:
            continue
        if stays:
            seq, state, entered, _ = stays[-1]
            stays[-1] = (seq, state, entered, ev.timestamp)
        stays.append((ev.seq, ev.fsm_state, ev.timestamp, end))
    return stays


def timeline_table(
    events: Iterable[Event],
    title: str,
    *,
    width: int = 80,
    opening: tuple[int, str, float] | None = None,
) -> Table:
    """The agent's stays in each state, oldest first, as a Gantt strip: where each stay
    starts and how long it lasts, on one time axis from the first event to the last.

    ``opening``: ``(seq, state, entered)`` of the state the agent was in just before the
    first event shown (the events start past seq 1: ``--after``, or history retention
    compacted): its stay is the first row, from when it was entered (its seq shown as
    ``≤seq``: it was entered at or before it), instead of being left out."""
    from .render import local_time

    evs = list(events)
    end = evs[-1].timestamp if evs else 0.0
    stays = _stays(evs, end)
    start = evs[0].timestamp if evs else 0.0
    first = stays[0][0] if stays else None
    if opening is not None:
        seq, state, entered = opening
        left = next((ev.timestamp for ev in evs if ev.fsm_state is not None), end)
        stays.insert(0, (seq, state, entered, left))
        start = min(start, entered)
    span = max(end - start, 1e-9)
    state_w = max((len(s[1]) for s in stays), default=5)
    seq_w = max(3, len(str(evs[-1].seq)) if evs else 3)
    # seq, entered (12), state, for (7), each followed by one space of padding
    strip = max(10, width - seq_w - state_w - 24)
    table = titled_table(title)
    table.add_column("seq", justify="right", no_wrap=True, min_width=seq_w)
    table.add_column("entered", no_wrap=True, min_width=12)
    table.add_column("state", no_wrap=True, min_width=state_w)
    table.add_column("for", justify="right", no_wrap=True, min_width=7)
    table.add_column("", no_wrap=True, width=strip)
    for seq, state, entered, left in stays:
        shown = (
            f"≤{seq}" if opening is not None and seq == opening[0] and seq != first else str(seq)
        )
        lead = int((entered - start) / span * strip)
        cells = max(1, round((left - entered) / span * strip))
        cells = min(cells, strip - lead) if lead < strip else 1
        lead = min(lead, strip - cells)
        colour = state_colour(state)
        table.add_row(
            shown,
            local_time(entered, date=False),
            f"[{colour}]{escape(state)}[/]",
            duration(left - entered) if left > entered else "-",
            " " * lead + f"[{colour}]{'█' * cells}[/]",
        )
    return table
