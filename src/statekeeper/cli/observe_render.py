"""Terminal pictures of ``statekeeper health`` and ``analyze`` (rich tables and bars)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markup import escape, escape_id
from ._table import titled_table
from .charts import duration, hbar, human_bytes, state_bars

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from ..observability.analysis.markov import TransitionMatrix
    from ..observability.health import HealthReport

__all__ = ["health_renderables", "heat_colour", "matrix_table"]

#: white -> deep blue, by probability (the heat map's scale)
_HEAT = ("grey35", "blue", "dodger_blue2", "deep_sky_blue1", "turquoise2", "bright_white")


def heat_colour(p: float) -> str:
    """The colour of a probability cell (0: dim, 1: brightest)."""
    if p <= 0:
        return _HEAT[0]
    return _HEAT[min(len(_HEAT) - 1, 1 + int(p * (len(_HEAT) - 1)))]


def matrix_table(m: TransitionMatrix, title: str) -> RenderableType:
    """The transition matrix as a heat map: one row per source state, each cell the
    probability (and count) coloured by its value; then the stationary share and the
    row's entropy."""
    # rich's default padding (one space each side): two spaces between the columns
    table = titled_table(
        f"{title}: P(row → column), n = {m.transitions} transitions", padding=(0, 1)
    )
    table.add_column("from \\ to", overflow="fold")
    for s in m.states:
        table.add_column(escape(s), justify="right", overflow="fold")
    table.add_column("π", justify="right", no_wrap=True)
    table.add_column("H", justify="right", no_wrap=True)
    for i, source in enumerate(m.states):
        cells = []
        for j in range(len(m.states)):
            p, n = m.matrix[i][j], m.counts[i][j]
            text = f"{p:.2f}" if n or p else "·"
            cells.append(f"[{heat_colour(p)}]{text}[/]")
        absorbing = " *" if source in m.absorbing else ""
        table.add_row(
            escape(source) + absorbing,
            *cells,
            f"{m.stationary[i]:.3f}",
            f"{m.row_entropy(source):.2f}",
        )
    table.caption = (
        ("* absorbing (never left) · " if m.absorbing else "")
        + "H: entropy of the row (bits) · entropy rate"
        f" {m.entropy_rate:.3f} bits/transition · stationary entropy"
        f" {m.stationary_entropy:.3f} bits · {'irreducible' if m.irreducible else 'reducible'}"
    )
    return table


def health_renderables(report: HealthReport, width: int) -> list[RenderableType]:
    """Tables and bars of a health report, most urgent first."""
    out: list[RenderableType] = []
    if report.breaches:
        out.append(
            "[bold red]✗ unhealthy[/]\n" + "\n".join(f"  • {escape(b)}" for b in report.breaches)
        )
    else:
        out.append(f"[green]✓ healthy[/] — {report.agents} agent(s)")
    if report.by_state:
        out.append(state_bars({k or "-": v for k, v in report.by_state.items()}, width))

    def table(title: str, *columns: str) -> Table:
        t = titled_table(title, padding=(0, 1))
        for c in columns:
            t.add_column(c, overflow="fold")
        return t

    if report.stuck:
        t = table("Stuck agents", "agent", "state", "for", "usual", "why")
        for s in report.stuck:
            t.add_row(
                escape_id(s.agent_id),
                escape(s.state),
                duration(s.seconds),
                duration(s.usual_seconds) if s.usual_seconds is not None else "-",
                escape(s.reason),
            )
        out.append(t)
    if report.largest:
        biggest = max(z.state_bytes for z in report.largest) or 1
        t = table(
            "Largest states (latest snapshot, else the events)", "agent", "size", "replay", ""
        )
        for z in report.largest:
            t.add_row(
                escape_id(z.agent_id),
                human_bytes(z.state_bytes),
                f"{z.replay_events:,}",
                f"[blue]{hbar(z.state_bytes / biggest, max(10, width // 3))}[/]",
            )
        out.append(t)
    if report.fastest_growing:
        most = max(g.events for g in report.fastest_growing) or 1
        t = table("Fastest-growing streams", "agent", "events", "per hour", "")
        for g in report.fastest_growing:
            t.add_row(
                escape_id(g.agent_id),
                f"{g.events:,}",
                f"{g.per_hour:,.1f}",
                f"[cyan]{hbar(g.events / most, max(10, width // 3))}[/]",
            )
        out.append(t)
    if report.due_snapshot:
        t = table("Streams due a snapshot", "agent", "events since snapshot")
        for z in report.due_snapshot[:20]:
            t.add_row(escape_id(z.agent_id), f"{z.replay_events:,}")
        out.append(t)
    if report.failing_verification:
        t = table("Failing verification", "agent", "problem")
        for agent_id, reason in report.failing_verification:
            t.add_row(escape_id(agent_id), escape(reason))
        out.append(t)
    if report.stale_leases:
        t = table("Lease holders that stopped renewing", "agent", "holder", "token", "expired")
        for lease in report.stale_leases:
            t.add_row(
                escape_id(lease.agent_id),
                escape(lease.holder),
                str(lease.token),
                duration(lease.expired_for) + " ago",
            )
        out.append(t)
    if report.rates is not None:
        r = report.rates
        out.append(
            f"operations {r.operations:,} · errors {r.errors:,} ({r.error_rate:.2%}) · "
            f"conflicts {r.conflicts:,} · retries {r.retries:,} ({r.retry_rate:.2%}) · "
            f"fencing rejections {r.fencing_rejections:,} · integrity failures"
            f" {r.integrity_failures:,}"
        )
    if report.unreadable:
        t = table("Unreadable agents", "agent", "error")
        for agent_id, error in report.unreadable:
            t.add_row(escape_id(agent_id), escape(error))
        out.append(t)
    if report.forgotten:
        out.append(
            f"left out {len(report.forgotten)} forgotten agent(s) (their data keys are"
            f" destroyed): {escape(', '.join(report.forgotten))}"
        )
    return out
