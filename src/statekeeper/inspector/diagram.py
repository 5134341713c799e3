"""An agent's machine as an SVG diagram: states on a circle in breadth-first order from
the initial state, one curved arrow per (from, to) pair labelled with its events and how
often this agent took each, the current state highlighted.

The graph is the union of the machine's rules and the transitions the agent's history
shows: a transition the machine has no rule for is drawn dashed (class
``unmodelled``), so a store written by another machine (or none) still gets a truthful
picture. Every label is escaped; styling is by class (the page's CSS), never inline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..records import Event

__all__ = ["Graph", "observe_transitions", "render_svg"]


@dataclass
class Graph:
    """States, and per (from, to) the events with their observed counts."""

    states: list[str] = field(default_factory=list)
    initial: str | None = None
    finals: set[str] = field(default_factory=set)
    #: (from, to) -> {event: count}
    edges: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: (from, to, event) the machine has a rule for
    modelled: set[tuple[str, str, str]] = field(default_factory=set)
    #: transitions counted, and whether the count stopped early
    counted: int = 0
    truncated: bool = False
    #: retention compacted the history up to this seq: only the events after it counted
    compacted: int = 0

    def add_state(self, name: str) -> None:
        if name not in self.states:
            self.states.append(name)

    def add(self, frm: str, event: str, to: str, n: int = 0) -> None:
        self.add_state(frm)
        self.add_state(to)
        events = self.edges.setdefault((frm, to), {})
        events[event] = events.get(event, 0) + n


def from_machine(machine: AgentStateMachine[Any, Any] | None) -> Graph:
    graph = Graph()
    if machine is None:
        return graph
    from ..machine import value_label
    from ..machine.diagram import reading_order

    for state in reading_order(machine):
        graph.add_state(value_label(state))
    graph.initial = value_label(machine.initial)
    graph.finals = {value_label(s) for s in machine.final_states}
    for rule in machine.rules:
        frm, event, to = (
            value_label(rule.from_state),
            value_label(rule.event),
            value_label(rule.to_state),
        )
        graph.add(frm, event, to)
        graph.modelled.add((frm, to, event))
    return graph


def observe_transitions(graph: Graph, events: Iterable[Event]) -> None:
    """Count the agent's transition events onto ``graph``."""
    for ev in events:
        if ev.type != "transition":
            continue
        graph.counted += 1
        graph.add(str(ev.info.get("from")), str(ev.info.get("event")), str(ev.info.get("to")), 1)


def _node_size(name: str) -> tuple[float, float]:
    return max(70.0, 7.5 * min(len(name), 24) + 24), 34.0


def _short(name: str, n: int = 24) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def render_svg(graph: Graph, current: str | None) -> Markup:
    """The diagram as inline SVG markup (safe to embed: every text is escaped)."""
    states = list(graph.states)
    if current is not None and current not in states:
        states.append(current)
    if not states:
        return Markup('<p class="muted">No states: this agent never moved its machine.</p>')
    n = len(states)
    radius = 0.0 if n == 1 else max(170.0, 64.0 * n / math.pi)
    cx = cy = radius + 95
    width = height = 2 * cx
    pos: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(states):
        angle = -math.pi / 2 + 2 * math.pi * i / n
        pos[name] = (cx + radius * math.cos(angle), cy + radius * math.sin(angle))
    parts = [
        f'<svg class="machine" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="state machine diagram" xmlns="http://www.w3.org/2000/svg">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
        'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>',
    ]
    labels: list[str] = []
    for (frm, to), events in graph.edges.items():
        x1, y1 = pos[frm]
        x2, y2 = pos[to]
        taken = sum(events.values())
        unmodelled = any((frm, to, e) not in graph.modelled for e in events)
        cls = "edge" + (" taken" if taken else "") + (" unmodelled" if unmodelled else "")
        label = ", ".join(
            f"{_short(e, 18)} ×{c}" if c else _short(e, 18) for e, c in sorted(events.items())
        )
        if frm == to:
            w, h = _node_size(frm)
            d = (
                f"M{x1 - 12:.1f},{y1 - h / 2:.1f} C{x1 - 40:.1f},{y1 - h / 2 - 50:.1f} "
                f"{x1 + 40:.1f},{y1 - h / 2 - 50:.1f} {x1 + 12:.1f},{y1 - h / 2:.1f}"
            )
            lx, ly = x1, y1 - h / 2 - 42
        else:
            dx, dy = x2 - x1, y2 - y1
            dist = math.hypot(dx, dy) or 1.0
            ux, uy = dx / dist, dy / dist
            # start and end at the boxes' edges (approximately), bend to the right
            w1, h1 = _node_size(frm)
            w2, h2 = _node_size(to)
            s = min(w1 / 2 / (abs(ux) or 1e-9), h1 / 2 / (abs(uy) or 1e-9))
            e = min(w2 / 2 / (abs(ux) or 1e-9), h2 / 2 / (abs(uy) or 1e-9))
            sx, sy = x1 + ux * s, y1 + uy * s
            ex, ey = x2 - ux * (e + 2), y2 - uy * (e + 2)
            bend = max(34.0, 0.2 * dist)  # short edges bend more: their labels part
            mx, my = (sx + ex) / 2 - uy * bend, (sy + ey) / 2 + ux * bend
            d = f"M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}"
            lx, ly = (sx + 2 * mx + ex) / 4, (sy + 2 * my + ey) / 4
        parts.append(
            f'<g class="{cls}" data-from="{escape(frm)}" data-to="{escape(to)}">'
            f'<path d="{d}" marker-end="url(#arrow)"/></g>'
        )
        labels.append(  # drawn last, over the boxes, so no label hides under one
            f'<g class="{cls} label" data-from="{escape(frm)}" data-to="{escape(to)}">'
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle">{escape(label)}</text></g>'
        )
    for name in states:
        x, y = pos[name]
        w, h = _node_size(name)
        cls = "state"
        if name == current:
            cls += " current"
        if name in graph.finals:
            cls += " final"
        if name == graph.initial:
            cls += " initial"
        title = "current state" if name == current else "state"
        parts.append(
            f'<g class="{cls}" data-state="{escape(name)}"><title>{escape(title)}: '
            f'{escape(name)}</title><rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" '
            f'width="{w:.1f}" height="{h:.1f}" rx="9"/>'
            f'<text x="{x:.1f}" y="{y + 5:.1f}" text-anchor="middle">'
            f"{escape(_short(name))}</text></g>"
        )
    parts.extend(labels)
    parts.append("</svg>")
    return Markup("".join(parts))
