"""Pictures as files (SVG or PNG, chosen by the file name): the transition matrix as a
heat map, the machine with its observed probabilities on the edges, and time series of
a store's activity and of recorded live metrics. Drawn with matplotlib (the ``plots``
extra), through its object-oriented API on the Agg canvas: no pyplot, no global figure
state, no display.

SVG text is written as ``<text>`` elements (``svg.fonttype: none``), so state names and
probabilities stay searchable and selectable; the files carry no date, so the same
input makes the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidArgument

if TYPE_CHECKING:
    from .analysis.markov import TransitionMatrix
    from .analysis.series import ActivitySeries
    from .series import MetricSeries

__all__ = [
    "check_path",
    "require_matplotlib",
    "write_heat_map",
    "write_machine_diagram",
    "write_metric_series",
    "write_time_series",
]

FORMATS = ("svg", "png")


def check_path(path: str | Path) -> None:
    """Refuse a picture path that is not an .svg or .png file in an existing folder."""
    _format(path)


def require_matplotlib() -> None:
    """:class:`ConfigurationError` naming the extra to install when matplotlib is not."""
    _matplotlib()


def _format(path: str | Path) -> tuple[Path, str]:
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InvalidArgument("out", f"pictures are written as .svg or .png files, not {p.name!r}")
    if not p.parent.is_dir():
        raise InvalidArgument("out", f"no such directory: {str(p.parent)!r}")
    if p.is_dir():
        raise InvalidArgument("out", f"{str(p)!r} is a directory")
    if p.is_symlink() or (p.exists() and not _ours(p, fmt)):
        raise InvalidArgument(
            "out",
            f"{str(p)!r} exists and is not a picture statekeeper wrote: "
            "remove it or choose another name (it is left as it is)",
        )
    return p, fmt


#: what each picture carries in its metadata, so that a picture statekeeper wrote is
#: drawn again over itself and any other file by that name is refused, not overwritten
#: (an SVG's ``<dc:creator>``, a PNG's ``Software`` text chunk)
CREATOR = "statekeeper pictures"
_MARKS = {
    "svg": f"<dc:title>{CREATOR}</dc:title>".encode(),
    "png": b"Software\x00" + CREATOR.encode(),
}


def _ours(path: Path, fmt: str) -> bool:
    """Whether the file at ``path`` is a picture of ours (its metadata within the first
    64 KiB: matplotlib writes it before the drawing)."""
    try:
        with path.open("rb") as fh:
            return _MARKS[fmt] in fh.read(65536)
    except OSError:
        return False


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401 - checks the install
    except ImportError as exc:
        raise ConfigurationError(
            "pictures as files need matplotlib: pip install 'statekeeper[plots]'"
        ) from exc
    return matplotlib


def _style() -> AbstractContextManager[Any]:
    mpl = _matplotlib()
    return mpl.rc_context(  # type: ignore[no-any-return]
        {
            "svg.fonttype": "none",  # text as <text>, not glyph paths
            "svg.hashsalt": "statekeeper",  # stable ids: same input, same file
            "font.size": 10,
        }
    )


def _save(fig: Any, path: Path, fmt: str) -> Path:
    from .._files import new_temporary, replace_durably

    metadata: dict[str, Any] = (
        {"Date": None, "Creator": CREATOR} if fmt == "svg" else {"Software": CREATOR}
    )
    _format(path)  # checked again at the last moment: nothing else took the name since
    fd, tmp = new_temporary(path)  # a new file renamed over the target: never through a link
    try:
        with open(fd, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=100, metadata=metadata, bbox_inches="tight")
            replace_durably(fh, tmp, path)  # a power loss: the old picture or the new
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_heat_map(matrix: TransitionMatrix, path: str | Path, *, title: str = "") -> Path:
    """``P`` as a heat map: a cell per (from, to), coloured by probability, labelled
    with the probability and the count of moves."""
    out, fmt = _format(path)
    with _style():
        from matplotlib.figure import Figure

        n = len(matrix.states)
        side = max(3.0, 1.0 + 0.9 * n)
        fig = Figure(figsize=(side + 1.5, side))
        ax = fig.add_subplot()
        data = [list(row) for row in matrix.matrix] if n else [[0.0]]
        image = ax.imshow(data, cmap="Blues", vmin=0.0, vmax=1.0)
        ticks = list(range(n))
        ax.set_xticks(ticks, labels=list(matrix.states), rotation=45, ha="right")
        ax.set_yticks(ticks, labels=list(matrix.states))
        ax.set_xlabel("to")
        ax.set_ylabel("from")
        for i in range(n):
            for j in range(n):
                p, count = matrix.matrix[i][j], matrix.counts[i][j]
                if not (p or count):
                    continue
                absorbing = i == j and matrix.states[i] in matrix.absorbing
                ax.text(
                    j,
                    i,
                    f"{p:.2f}\n" + ("(absorbing)" if absorbing else f"(n={count})"),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if p > 0.6 else "black",
                )
        fig.colorbar(image, ax=ax, label="P(from → to)")
        ax.set_title(title or f"P(from → to), n = {matrix.transitions} transitions")
        return _save(fig, out, fmt)


def write_machine_diagram(
    matrix: TransitionMatrix, path: str | Path, *, title: str = "", min_probability: float = 0.0
) -> Path:
    """The machine as observed: a node per state (on a circle), an arrow per observed
    move labelled with its probability and count; edges with ``P < min_probability``
    are left out. Absorbing states (entered, never left) are drawn with a double ring."""
    out, fmt = _format(path)
    if not 0.0 <= min_probability <= 1.0:
        raise InvalidArgument(
            "min_probability", f"min_probability must be in [0, 1], not {min_probability!r}"
        )
    with _style():
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle, FancyArrowPatch

        states = matrix.states
        n = len(states)
        radius = 0.0 if n == 1 else max(1.6, 0.55 * n)
        pos = [
            (
                radius * math.cos(math.pi / 2 - 2 * math.pi * i / n),
                radius * math.sin(math.pi / 2 - 2 * math.pi * i / n),
            )
            for i in range(n)
        ]
        node = 0.42
        side = max(4.0, 2 * radius + 2.5)
        fig = Figure(figsize=(side, side))
        ax = fig.add_subplot()
        ax.set_aspect("equal")
        ax.axis("off")
        lim = radius + 1.4
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        for i, state in enumerate(states):
            x, y = pos[i]
            ax.add_patch(Circle((x, y), node, facecolor="#dbe9f6", edgecolor="#08519c", lw=1.5))
            if state in matrix.absorbing:
                ax.add_patch(Circle((x, y), node * 0.85, fill=False, edgecolor="#08519c"))
            ax.text(x, y, state, ha="center", va="center", fontsize=9)
        for i, source in enumerate(states):
            if source in matrix.absorbing:
                continue  # its P_ii = 1 is assumed, not observed
            for j in range(n):
                p, count = matrix.matrix[i][j], matrix.counts[i][j]
                if not count or p < min_probability:
                    continue
                label = f"{p:.2f} ({count})"
                (x0, y0), (x1, y1) = pos[i], pos[j]
                if i == j:  # a loop on the outside of the circle
                    ux, uy = (x0, y0) if radius else (0.0, 1.0)
                    norm = math.hypot(ux, uy) or 1.0
                    ux, uy = ux / norm, uy / norm
                    px, py = -uy, ux
                    start = (x0 + node * (ux + 0.5 * px), y0 + node * (uy + 0.5 * py))
                    end = (x0 + node * (ux - 0.5 * px), y0 + node * (uy - 0.5 * py))
                    arrow = FancyArrowPatch(
                        start,
                        end,
                        connectionstyle="arc3,rad=-2.2",
                        arrowstyle="-|>",
                        mutation_scale=12,
                        color="#444444",
                        lw=1.0,
                    )
                    ax.add_patch(arrow)
                    lx, ly = x0 + ux * (node + 0.55), y0 + uy * (node + 0.55)
                else:
                    arrow = FancyArrowPatch(
                        (x0, y0),
                        (x1, y1),
                        connectionstyle="arc3,rad=0.18",
                        arrowstyle="-|>",
                        mutation_scale=12,
                        shrinkA=node * 72 * 0.62,
                        shrinkB=node * 72 * 0.62,
                        color="#444444",
                        lw=0.6 + 2.4 * p,
                    )
                    ax.add_patch(arrow)
                    # the label sits on the bulge of the arc (rad 0.18: left of travel)
                    mx, my = (x0 + x1) / 2, (y0 + y1) / 2
                    dx, dy = x1 - x0, y1 - y0
                    lx, ly = mx + 0.18 * dy * 0.5, my - 0.18 * dx * 0.5
                ax.text(
                    lx,
                    ly,
                    label,
                    ha="center",
                    va="center",
                    fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"},
                )
        ax.set_title(title or f"observed transitions (n = {matrix.transitions})")
        return _save(fig, out, fmt)


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


def write_time_series(series: ActivitySeries, path: str | Path, *, title: str = "") -> Path:
    """The activity of a store over a period, one panel per series sharing the time
    axis (UTC): events and transitions per second, active agents, agents by state
    (stacked), and the entropy of the states moved into."""
    out, fmt = _format(path)
    with _style():
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9.0, 9.0))
        axes: Sequence[Any] = fig.subplots(4, 1, sharex=True)
        when = [_when(t) for t in series.starts]
        rate = 1.0 / series.step
        ax = axes[0]
        ax.plot(when, [n * rate for n in series.events], label="events appended / s")
        ax.plot(when, [n * rate for n in series.transitions], label="transitions / s")
        ax.set_ylabel("per second")
        ax.legend(loc="upper left", fontsize=8)
        axes[1].plot(when, list(series.active_agents), color="tab:green")
        axes[1].set_ylabel("active agents")
        ax = axes[2]
        if series.agents_by_state:
            ax.stackplot(
                when,
                *[list(v) for v in series.agents_by_state.values()],
                labels=list(series.agents_by_state),
                step="post",
            )
            ax.legend(loc="upper left", fontsize=8, ncols=min(4, len(series.agents_by_state)))
        ax.set_ylabel("agents by state")
        axes[3].plot(when, list(series.entropy), color="tab:purple")
        axes[3].set_ylabel("entropy (bits)")
        axes[3].set_xlabel(f"UTC, {series.step:g} s per point")
        fig.autofmt_xdate()
        fig.suptitle(title or "store activity")
        return _save(fig, out, fmt)


def write_metric_series(series: MetricSeries, path: str | Path, *, title: str = "") -> Path:
    """Recorded live metrics (:func:`.series.metric_series`), one panel per metric on a
    shared time axis (UTC), a line per label set or quantile; an interval without a
    value (no observation, a failed scrape) is a gap."""
    out, fmt = _format(path)
    with _style():
        from matplotlib.figure import Figure

        n = max(1, len(series.panels))
        fig = Figure(figsize=(9.0, 0.6 + 2.2 * n), layout="constrained")
        axes: Sequence[Any] = list(fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0])
        when = [_when(t) for t in series.times]
        for ax, panel in zip(axes, series.panels, strict=False):
            positive = [v for ln in panel.lines for v in ln.values if v is not None and v > 0]
            for line in panel.lines:
                values = [math.nan if v is None else v for v in line.values]
                ax.plot(when, values, marker=".", markersize=3, label=line.label)
            if panel.kind == "quantile" and positive and max(positive) > 20 * min(positive):
                ax.set_yscale("log")  # latencies spanning decades
            ax.set_title(panel.title, fontsize=9, loc="left")
            ax.set_ylabel(panel.unit)
            if len(panel.lines) > 1:
                ax.legend(loc="upper left", fontsize=7, ncols=min(3, len(panel.lines)))
        axes[-1].set_xlabel("UTC")
        fig.autofmt_xdate()
        fig.suptitle(title or f"recorded metrics, {len(series.times)} samples")
        return _save(fig, out, fmt)
