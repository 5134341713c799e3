"""``statekeeper diagram``: a state machine drawn in the terminal (or as Mermaid/DOT),
optionally with what a store observed laid over it.

* ``--machine module:attr`` draws the user's own machine: ``attr`` is an
  :class:`~statekeeper.machine.AgentStateMachine`, or a callable (a class, a factory)
  returning one. The current directory is importable, as for ``python -m``.
* ``--db URL`` (before or after the command name) reads every agent's history and
  overlays, per state, how many agents are in it now, how often it was entered and
  the time spent in it (stays that ended); and per rule, how often it was taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .app import DbOption, KeyFileOption, app, global_db, handled, open_store, out_console, run

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..machine import AgentStateMachine

__all__ = ["Observed", "diagram", "observe", "render_machine"]


class DiagramFormat(StrEnum):
    text = "text"
    mermaid = "mermaid"
    dot = "dot"


@dataclass
class StateStats:
    now: int = 0
    entered: int = 0
    closed: int = 0
    seconds: float = 0.0


@dataclass
class Observed:
    """What a store's history shows about a machine's states and rules."""

    agents: int = 0
    events: int = 0
    states: dict[str, StateStats] = field(default_factory=dict)
    #: (from, event, to) -> times taken
    rules: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: agents passed over: crypto-shredded by ``forget`` (their records do not open)
    forgotten: list[str] = field(default_factory=list)
    #: agents whose history retention compacted: counted from their base on only
    compacted: list[str] = field(default_factory=list)

    def state(self, name: str) -> StateStats:
        return self.states.setdefault(name, StateStats())


async def observe(url: str, *, quiet: bool = False, key_file: Path | None = None) -> Observed:
    """Read every agent's history in the store at ``url`` (with a progress bar)."""
    from ..errors import AgentForgotten
    from ..observability.analysis.history import kept_history
    from ..records import Snapshot
    from .progress import bar

    seen = Observed()
    async with open_store(url, key_file=key_file) as store:
        total = await store.count_agents()
        with bar("reading histories", disable=quiet) as progress:
            task = progress.add_task("observe", total=total)
            async for info in store.iter_agents():
                progress.advance(task)
                try:  # read whole first: a forgotten agent adds nothing to the counts
                    items = [ev async for ev in kept_history(store, info.agent_id)]
                except AgentForgotten:
                    seen.forgotten.append(info.agent_id)
                    continue
                seen.agents += 1
                current: tuple[str, float] | None = None
                for ev in items:
                    if isinstance(ev, Snapshot):  # retention's base: the state it was in
                        seen.compacted.append(info.agent_id)
                        if ev.fsm_state is not None:
                            current = (ev.fsm_state, ev.state_entered_at or ev.updated_at)
                        continue
                    seen.events += 1
                    if ev.type == "transition":
                        key = (
                            str(ev.info.get("from")),
                            str(ev.info.get("event")),
                            str(ev.info.get("to")),
                        )
                        seen.rules[key] = seen.rules.get(key, 0) + 1
                    if ev.fsm_state is None:
                        continue
                    if current is not None:
                        stats = seen.state(current[0])
                        stats.closed += 1
                        stats.seconds += ev.timestamp - current[1]
                    seen.state(ev.fsm_state).entered += 1
                    current = (ev.fsm_state, ev.timestamp)
                if current is not None:
                    seen.state(current[0]).now += 1
    return seen


def render_machine(
    machine: AgentStateMachine[Any, Any], seen: Observed | None, width: int
) -> RenderableType:
    """The machine as boxes (states, in breadth-first order from the initial state)
    with arrows for the rules leaving each one."""
    from rich.console import Group
    from rich.text import Text

    from ..machine import value_label
    from ..machine.diagram import edge_label, reading_order
    from ._markup import escape
    from .charts import duration, state_colour

    order = reading_order(machine)
    finals = set(machine.final_states)
    header = (
        f"[bold]{len(machine.states)} states, {len(machine.rules)} rules[/], starts in "
        f"[bold]{escape(value_label(machine.initial))}[/]"
        + (
            f"; final: {escape(', '.join(value_label(s) for s in machine.final_states))}"
            if finals
            else ""
        )
    )
    lines: list[Any] = [Text.from_markup(header)]
    if seen is not None:
        lines.append(
            Text.from_markup(
                f"[dim]observed: {seen.agents:,} agent(s), {seen.events:,} event(s); "
                "×N = times a rule was taken, now = agents in the state, "
                "avg = mean time of the stays that ended[/]"
            )
        )
    lines.append(Text(""))
    taken: set[tuple[str, str, str]] = set()
    label_w = min(28, max((len(edge_label(r)) for r in machine.rules), default=0))
    for state in order:
        name = value_label(state)
        colour = state_colour(name)
        mark = "▶ " if state == machine.initial else ""
        mark += "◉ " if state in finals else ""
        inner = [Text.from_markup(f"{mark}[bold {colour}]{escape(name)}[/]")]
        stats = seen.states.get(name) if seen is not None else None
        if seen is not None:
            s = stats or StateStats()
            avg = duration(s.seconds / s.closed) if s.closed else "-"
            inner.append(Text(f"now {s.now:,} · in {s.entered:,}"))
            inner.append(Text(f"avg {avg}"))
        arrows: list[Text] = []
        for rule in machine.rules_from(state):
            target = value_label(rule.to_state)
            label = edge_label(rule)
            arrow = Text("──")
            arrow.append(label)
            arrow.append("─" * (label_w - len(label)) + "──▶ ")
            arrow.append(target, style=f"bold {state_colour(target)}")
            if seen is not None:
                key = (name, value_label(rule.event), target)
                taken.add(key)
                n = seen.rules.get(key, 0)
                arrow.append(f"  ×{n:,}", style="bold" if n else "dim")
            arrows.append(arrow)
        box_w = max(t.cell_len for t in inner) + 2
        height = max(len(inner), len(arrows))
        lines.append(Text("╭" + "─" * box_w + "╮"))
        for i in range(height):
            row = Text("│ ")
            cell = inner[i] if i < len(inner) else Text("")
            row.append_text(cell)
            row.append(" " * (box_w - 1 - cell.cell_len) + "│")
            if i < len(arrows):
                row.append(" ")
                row.append_text(arrows[i])
            lines.append(row)
        lines.append(Text("╰" + "─" * box_w + "╯"))
    if seen is not None:
        if seen.forgotten:
            lines.append(
                Text(
                    f"left out {len(seen.forgotten):,} forgotten agent(s) (their data keys are"
                    f" destroyed): {', '.join(seen.forgotten)}",
                    style="dim",
                )
            )
        if seen.compacted:  # (was: counted as if whole, without a word)
            shown = ", ".join(seen.compacted[:5]) + (", ..." if len(seen.compacted) > 5 else "")
            lines.append(
                Text(
                    f"{len(seen.compacted):,} agent(s) compacted by retention: counted over the"
                    f" events kept after their base only: {shown}",
                    style="dim",
                )
            )
        extra = {k: n for k, n in seen.rules.items() if k not in taken}
        if extra:
            lines.append(Text("observed transitions this machine has no rule for:", style="yellow"))
            for (frm, event, to), n in sorted(extra.items()):
                lines.append(Text(f"  {frm} ──{event}──▶ {to}  ×{n:,}", style="yellow"))
    for line in lines:
        line.overflow = "fold"
    return Group(*lines)


@app.command()
@handled
def diagram(
    ctx: typer.Context,
    fmt: Annotated[
        DiagramFormat,
        typer.Option(
            "--format",
            "-f",
            case_sensitive=False,
            help="text: boxes and arrows in the terminal; mermaid or dot: source to "
            "render elsewhere.",
        ),
    ] = DiagramFormat.text,
    machine_spec: Annotated[
        str | None,
        typer.Option(
            "--machine",
            "-m",
            metavar="MODULE:ATTR",
            help="Your machine: an AgentStateMachine, or a callable returning one "
            "[default: the default agent machine].",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
) -> None:
    """Draw a state machine; with --db, overlay what the store observed."""
    from ..machine.loading import load_machine

    machine = load_machine(machine_spec)
    if fmt is DiagramFormat.mermaid:
        typer.echo(machine.to_mermaid(), nl=False)
        return
    if fmt is DiagramFormat.dot:
        typer.echo(machine.to_dot(), nl=False)
        return
    url = db or global_db(ctx)
    seen = run(observe(url, key_file=key_file)) if url else None
    console = out_console()
    console.print(render_machine(machine, seen, console.width))
