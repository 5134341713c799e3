"""Recorded live metrics in the terminal (``metrics plot --from FILE`` without
``--out``): a table per panel, a sparkline per line with its lowest, highest and last
value, sized from the console width."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._markup import escape

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..observability.series import MetricSeries, Panel

__all__ = ["number", "series_renderables", "sparkline"]

_TICKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int) -> str:
    """``values`` in at most ``width`` cells (averaged in runs when there are more),
    scaled from their lowest to their highest; a run without a value is a blank."""
    if not values or width < 1:
        return ""
    cells: list[float | None] = []
    n = len(values)
    size = max(1, math.ceil(n / width))
    for i in range(0, n, size):
        run = [v for v in values[i : i + size] if v is not None and math.isfinite(v)]
        cells.append(sum(run) / len(run) if run else None)
    present = [c for c in cells if c is not None]
    if not present:
        return " " * len(cells)
    low, high = min(present), max(present)
    span = high - low
    out = []
    for c in cells:
        if c is None:
            out.append(" ")
        else:
            level = 0 if span == 0 else round((c - low) / span * (len(_TICKS) - 1))
            out.append(_TICKS[level])
    return "".join(out)


def number(value: float | None, unit: str) -> str:
    """A value for a table cell: durations in ms/µs, ratios as %, else 3 significant
    digits."""
    if value is None or not math.isfinite(value):
        return "–"
    if unit == "seconds":
        if value == 0:
            return "0"
        if abs(value) < 0.001:
            return f"{value * 1e6:.3g} µs"
        if abs(value) < 1:
            return f"{value * 1e3:.3g} ms"
        return f"{value:.3g} s"
    if unit == "ratio":
        return f"{value * 100:.1f} %"
    return f"{value:.3g}"


def _panel_table(panel: Panel, width: int) -> RenderableType:
    from rich.table import Table

    table = Table(
        box=None,
        pad_edge=False,
        show_header=True,
        header_style="bold",
    )
    label_width = min(24, max([len("series"), *(len(ln.label) for ln in panel.lines)]))
    spark = max(10, width - label_width - 3 * 11 - 8)
    table.add_column("series", max_width=label_width, overflow="ellipsis", no_wrap=True)
    table.add_column("over time", width=spark, no_wrap=True)
    for name in ("min", "max", "last"):
        table.add_column(name, justify="right", no_wrap=True)
    for line in panel.lines:
        present = [v for v in line.values if v is not None]
        last = next((v for v in reversed(line.values) if v is not None), None)
        table.add_row(
            escape(line.label),
            sparkline(line.values, spark),
            number(min(present) if present else None, panel.unit),
            number(max(present) if present else None, panel.unit),
            number(last, panel.unit),
        )
    return table


def series_renderables(series: MetricSeries, width: int) -> list[RenderableType]:
    """A heading and a table per panel."""
    from datetime import UTC, datetime

    def when(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")

    failed = f", {series.failed} failed" if series.failed else ""
    head = (
        f"{len(series.times)} samples{failed}, {when(series.times[0])} → "
        f"{when(series.times[-1])} UTC"
    )
    out: list[RenderableType] = [head]
    for panel in series.panels:
        out += [f"[bold]{escape(panel.title)}[/]", _panel_table(panel, width)]
    return out
