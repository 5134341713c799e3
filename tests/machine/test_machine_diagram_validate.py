"""Validation reports and Mermaid / DOT export."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from statekeeper.errors import InvalidMachineDefinition
from statekeeper.machine import AgentState, AgentStateMachine, TransitionRule
from statekeeper.machine.diagram import escape_dot, escape_mermaid


def has_enough_tokens(ctx: object) -> bool:
    return True


def summarise() -> None:
    return None


# ------------------------------------------------------------------- validation


def test_validate_reports_unreachable_and_dead_ends() -> None:
    m = AgentStateMachine(
        states=["start", "work", "done", "orphan", "stuck"],
        rules=[
            TransitionRule("start", "go", "work"),
            TransitionRule("work", "finish", "done"),
            TransitionRule("work", "jam", "stuck"),
            TransitionRule("orphan", "go", "start"),
        ],
        initial="start",
    )
    report = m.validate()
    assert not report.ok
    assert report.unreachable == ("orphan",)
    assert report.dead_ends == ("done", "stuck")
    assert "orphan" in str(report) and "stuck" in str(report)
    with pytest.raises(InvalidMachineDefinition):
        report.raise_for_problems()

    # declaring final states removes them from dead ends
    assert m.validate(final_states=["done"]).dead_ends == ("stuck",)
    m.mark_final("done", "stuck")
    report = m.validate()
    assert report.dead_ends == ()
    assert report.final_states == ("done", "stuck")
    assert report.unreachable == ("orphan",)


def test_validate_ignores_guards_structurally() -> None:
    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", guard=lambda: False)], final_states=["b"]
    )
    report = m.validate()
    assert report.ok
    report.raise_for_problems()
    assert "valid" in str(report)


def test_default_lifecycle_with_completed_final() -> None:
    m = AgentStateMachine(final_states=[AgentState.COMPLETED])
    assert m.validate().ok


# --------------------------------------------------------------------- diagrams


def guarded_machine() -> AgentStateMachine[str, str]:
    return AgentStateMachine(
        rules=[
            TransitionRule("idle", "start", "busy", guard=has_enough_tokens, action=summarise),
            TransitionRule("busy", "finish", "done"),
        ],
        final_states=["done"],
        name="demo",
    )


def test_mermaid_structure() -> None:
    text = guarded_machine().to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert '    state "idle" as s0' in lines
    assert '    state "busy" as s1' in lines
    assert '    state "done" as s2' in lines
    assert "    [*] --> s0" in lines
    assert "    s0 --> s1 : start [has_enough_tokens] / summarise" in lines
    assert "    s1 --> s2 : finish" in lines
    assert "    s2 --> [*]" in lines
    assert text.endswith("\n")


def test_mermaid_default_lifecycle_has_all_edges() -> None:
    text = AgentStateMachine().to_mermaid()
    edges = re.findall(r"^    (s\d) --> (s\d) : (\w+)$", text, flags=re.M)
    assert len(edges) == 11
    assert ("s0", "s1", "start_processing") in edges
    assert ("s5", "s0", "reset") in edges


def test_dot_structure() -> None:
    text = guarded_machine().to_dot()
    assert text.startswith('digraph "demo" {\n')
    assert text.rstrip().endswith("}")
    assert '    s0 [label="idle"];' in text
    assert '    s2 [label="done", shape=doublecircle];' in text
    assert "    __initial__ -> s0;" in text
    assert '    s0 -> s1 [label="start [has_enough_tokens] / summarise"];' in text
    assert '    s1 -> s2 [label="finish"];' in text


NASTY = 'a "quoted": state; with #hash %% {braces}\nand newline \\ backslash'


def test_mermaid_escapes_unsafe_names() -> None:
    m = AgentStateMachine(rules=[TransitionRule(NASTY, "go: now; ok", "end")])
    text = m.to_mermaid()
    lines = text.splitlines()
    assert len(lines) == 1 + 2 + 1 + 1  # header, 2 states, initial arrow, 1 edge
    forbidden = set(':;#%{}"\\\n')
    state_lines = [re.fullmatch(r'    state "([^"]*)" as (s\d+)', line) for line in lines[1:3]]
    assert all(state_lines)
    edge = re.fullmatch(r"    s0 --> s1 : (.*)", lines[4])
    assert edge is not None
    for label in [match.group(1) for match in state_lines if match] + [edge.group(1)]:
        assert not forbidden & set(re.sub(r"#\d+;", "", label)), label
    assert edge.group(1) == "go#58; now#59; ok"
    assert "#34;quoted#34;" in lines[1]


def test_mermaid_escape_function() -> None:
    assert escape_mermaid("plain_name-1.2 (x)") == "plain_name-1.2 (x)"
    assert escape_mermaid('a"b') == "a#34;b"
    assert escape_mermaid("a:b;c") == "a#58;b#59;c"
    assert escape_mermaid("100%") == "100#37;"
    assert escape_mermaid("é") == "é"


def test_dot_escapes_unsafe_names() -> None:
    m = AgentStateMachine(rules=[TransitionRule(NASTY, "go", "end")], name='my "fsm"')
    text = m.to_dot()
    assert 'digraph "my \\"fsm\\"" {' in text
    assert escape_dot(NASTY) in text
    assert escape_dot('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    # every line is a complete statement: quotes balanced once escapes are removed
    for line in text.splitlines():
        assert line.replace('\\"', "").count('"') % 2 == 0


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz not installed")
def test_dot_is_accepted_by_graphviz() -> None:  # pragma: no cover - depends on graphviz
    m = AgentStateMachine(rules=[TransitionRule(NASTY, "go", "end")])
    out = subprocess.run(
        ["dot", "-Tsvg"], input=m.to_dot(), capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
