"""Export a machine as Mermaid ``stateDiagram-v2`` or Graphviz DOT text.

Both exports give every state a generated identifier (``s0``, ``s1``… in declaration
order) and show its value as a label, so any state name — spaces, quotes, colons,
keywords of the target language — is safe. Edges are labelled ``event``, plus
``[guard]`` when the rule has a guard and ``/ action`` when it has an action; rules of
one (state, event) pair appear in the order their guards are tried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper.machine._callables import callable_name
from statekeeper.machine._compiled import value_label

if TYPE_CHECKING:
    from statekeeper.machine.machine import AgentStateMachine
    from statekeeper.machine.types import TransitionRule

__all__ = ["edge_label", "escape_dot", "escape_mermaid", "reading_order", "to_dot", "to_mermaid"]

_MERMAID_SAFE = frozenset(" _.,-()[]/+*=!?'@|~^$")


def escape_mermaid(text: str) -> str:
    """Encode ``text`` for a Mermaid label: unsafe characters become ``#<code>;`` entities.

    Colons, semicolons, quotes, ``#``, ``%``, braces, angle brackets and control
    characters would otherwise end or break a Mermaid statement.
    """
    return "".join(c if c.isalnum() or c in _MERMAID_SAFE else f"#{ord(c)};" for c in text)


def escape_dot(text: str) -> str:
    """Escape ``text`` for a double-quoted DOT string (backslashes, quotes, newlines)."""
    return (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\r\n", "\\n")
        .replace("\n", "\\n")
        .replace("\r", "\\n")
    )


def edge_label(rule: TransitionRule[Any, Any]) -> str:
    """``event``, ``event [guard]``, ``event / action`` or ``event [guard] / action``."""
    text = value_label(rule.event)
    if rule.guard is not None:
        text += f" [{callable_name(rule.guard)}]"
    if rule.action is not None:
        text += f" / {callable_name(rule.action)}"
    return text


def reading_order(machine: AgentStateMachine[Any, Any]) -> list[Any]:
    """The machine's states in the order a reader follows them (the CLI's and the web
    inspector's diagrams): the initial state, then breadth-first along the rules, then
    the states no rule reaches, in declaration order."""
    order = [machine.initial]
    i = 0
    while i < len(order):
        for rule in machine.rules_from(order[i]):
            if rule.to_state not in order:
                order.append(rule.to_state)
        i += 1
    return order + [s for s in machine.states if s not in order]


def _ids(machine: AgentStateMachine[Any, Any]) -> dict[Any, str]:
    return {state: f"s{i}" for i, state in enumerate(machine.states)}


def to_mermaid(machine: AgentStateMachine[Any, Any]) -> str:
    """Mermaid ``stateDiagram-v2`` text: ``[*]`` points at the initial state and final
    states point at ``[*]``."""
    ids = _ids(machine)
    lines = ["stateDiagram-v2"]
    for state, sid in ids.items():
        lines.append(f'    state "{escape_mermaid(value_label(state))}" as {sid}')
    lines.append(f"    [*] --> {ids[machine.initial]}")
    for rule in machine.rules:
        label = escape_mermaid(edge_label(rule))
        lines.append(f"    {ids[rule.from_state]} --> {ids[rule.to_state]} : {label}")
    for state in machine.final_states:
        lines.append(f"    {ids[state]} --> [*]")
    return "\n".join(lines) + "\n"


def to_dot(machine: AgentStateMachine[Any, Any]) -> str:
    """Graphviz DOT text: a point marks the initial state, final states are double circles."""
    ids = _ids(machine)
    finals = set(machine.final_states)
    lines = [
        f'digraph "{escape_dot(machine.name)}" {{',
        "    rankdir=LR;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica"];',
        '    __initial__ [shape=point, label=""];',
    ]
    for state, sid in ids.items():
        extra = ", shape=doublecircle" if state in finals else ""
        lines.append(f'    {sid} [label="{escape_dot(value_label(state))}"{extra}];')
    lines.append(f"    __initial__ -> {ids[machine.initial]};")
    for rule in machine.rules:
        label = escape_dot(edge_label(rule))
        lines.append(f'    {ids[rule.from_state]} -> {ids[rule.to_state]} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
