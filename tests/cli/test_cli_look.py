"""Issue 10 items 7, 8 and 10: help and output at 80 columns, unknown choices, start-up
imports, terminal pictures (diagram, stats bars, history timeline), progress bars.

Each kind of output is produced by a real process at least once (``sk``): start-up,
a table at 80 columns, a progress bar on a terminal and redirected, a user's machine
drawn, ``bench``; the other cases run the console script's own entry point in this
process (``sk_in_process``, same environment): a fresh interpreter costs about half a
CPU-second."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from statekeeper.cli import app
from statekeeper.cli._help import load_all

from ._proc import (
    ENGINES,
    assert_fits,
    empty_url,
    engine_url,
    imported,
    populate,
    sk,
    sk_in_process,
)

__all__ = ["empty_url", "engine_url"]

HEAVY = ["psycopg", "redis", "boto3", "langgraph", "moto", "cryptography", "zstandard"]


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    populate(url)
    return url


def command_paths() -> list[list[str]]:
    """Every command and subcommand of the CLI, as argv prefixes."""
    root = load_all(typer.main.get_command(app))
    paths: list[list[str]] = [[]]

    def walk(group: object, prefix: list[str]) -> None:
        for name, cmd in getattr(group, "commands", {}).items():
            if getattr(cmd, "hidden", False):
                continue
            paths.append([*prefix, name])
            walk(cmd, [*prefix, name])

    walk(root, [])
    return paths


# ----------------------------------------------------------------------- start-up


def test_import_statekeeper_loads_no_backend_driver_nor_the_cli() -> None:
    code = "import json, sys, statekeeper; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    for name in [*HEAVY, "statekeeper.store", "statekeeper.backends", "statekeeper.cli"]:
        assert name not in loaded, name
    # and the names still resolve, on first use
    code = "import statekeeper; print(statekeeper.StateStore.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "StateStore", done.stderr


def test_help_imports_neither_the_store_nor_the_demo_nor_drivers() -> None:
    modules = imported("--help")
    assert "statekeeper.cli.app" in modules
    for name in [
        *HEAVY,
        "asyncio",
        "rich",
        "statekeeper.store",
        "statekeeper.codec",
        "statekeeper.demo",
        "rich.progress",
    ]:
        assert name not in modules, name


def test_cli_default_url_is_the_library_default() -> None:
    from statekeeper.cli.app import DEFAULT_URL
    from statekeeper.store import DEFAULT_URL as LIBRARY_DEFAULT

    assert DEFAULT_URL == LIBRARY_DEFAULT


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "statekeeper")
def test_help_reads_at_80_columns(path: list[str]) -> None:
    result = sk_in_process(*path, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("Usage: statekeeper")
    assert_fits(text.replace("...", ""))  # click's own "..." in the command list is fine
    for bad in ("<bool>", "<int", "<str>", "<list", "<float", "<path>", "{", " .\n", " . "):
        assert bad not in text, (bad, text)


def test_help_keeps_bracketed_defaults() -> None:
    text = sk_in_process("agents", "--help").stdout
    assert "[default: $STATEKEEPER_URL, else" in text  # not eaten as markup


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        (["diagram", "--format", "png"], ["text", "mermaid", "dot"]),
        (["bench", "--only", "nope", "--s3", "off"], ["in-memory", "redis", "local"]),
    ],
)
def test_unknown_choice_is_an_error_listing_the_valid_ones(
    args: list[str], valid: list[str]
) -> None:
    result = sk_in_process(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for name in valid:
        assert name in result.stderr


# ------------------------------------------------------------- output at 80 columns


@pytest.mark.parametrize(
    "args",
    [
        ["agents"],
        ["show", "alpha"],
        ["history", "alpha"],
        ["history", "alpha", "--timeline"],
        ["stats"],
        ["verify"],
        ["diagram"],
        ["diagram", "--with-db"],
        ["diff", "alpha"],
        ["tail"],
    ],
    ids=" ".join,
)
def test_output_fits_80_columns(url: str, args: list[str]) -> None:
    if args == ["diagram", "--with-db"]:
        args = ["diagram", "--db", url]
    elif args[0] != "diagram":
        args = [*args, "--db", url]
    # one real process; the same entry point in this process for the others
    result = (sk if args == ["agents", "--db", url] else sk_in_process)(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert_fits(result.stdout)


def test_bench_table_fits_80_columns() -> None:
    result = sk(
        "bench", "--agents", "1", "--saves", "2", "--s3", "off",
        "--only", "in-memory", "--only", "local", "--only", "postgresql",
        STATEKEEPER_POSTGRES_URL="",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_fits(result.stdout)
    assert "In-Memory" in result.stdout and "Local (SQLite)" in result.stdout
    assert "skipped (1)" in result.stdout and "(1) skipped PostgreSQL: no PostgreSQL URL" in (
        " ".join(result.stdout.split())
    )


@pytest.mark.slow
def test_demo_fits_80_columns(tmp_path: Path) -> None:
    result = sk(
        "demo", "--db", str(tmp_path / "demo.db"), "--kill-after", "9", "--step-delay", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert_fits(result.stdout)
    assert "+0.000s" in result.stdout  # the timeline's time column, narrowed
    # the command it tells the user to run is one line, whole, however long the path
    told = [line for line in result.stdout.splitlines() if line.startswith("inspect it: ")]
    assert told == [f"inspect it: statekeeper history demo-research-1 --db {tmp_path / 'demo.db'}"]


# ------------------------------------------------------------------ stats, history


def test_stats_bars_and_largest_agents(url: str) -> None:
    result = sk_in_process("stats", "--db", url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Agents by state" in out and "█" in out
    assert "Largest 3 agent(s)" in out
    data = json.loads(sk_in_process("stats", "--db", url, "--json").stdout)
    assert data["states"] == {"-": 1, "completed": 1, "processing": 1}
    assert [r["agent_id"] for r in data["largest"]] == ["alpha", "gamma", "beta"]
    assert [r["events"] for r in data["largest"]] == [4, 3, 2]
    assert all(r["bytes"] > 0 for r in data["largest"])
    top = sk_in_process("stats", "--db", url, "--json", "--top", "1")
    assert json.loads(top.stdout)["largest"] == [data["largest"][0]]


def test_history_timeline(url: str) -> None:
    result = sk_in_process("history", "alpha", "--db", url, "--timeline")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line[:5].strip().isdigit()]
    # seq, entered, state, for (the clock ticks every 1000 s)
    assert [(r[0], r[2]) for r in rows] == [
        ("1", "idle"),
        ("2", "processing"),
        ("3", "tool_call"),
        ("4", "processing"),
    ]
    assert [" ".join(r[3:5]) for r in rows[:3]] == ["16m 40s"] * 3
    assert rows[3][3] == "-"  # the current stay has not ended


@pytest.mark.parametrize(
    ("command", "rate", "done"),
    [
        (["stats"], "agents/s", "3/3"),
        (["agents"], "agents/s", "3/3"),
        (["verify"], "agents/s", "3/3"),
        (["diagram"], "agents/s", "3/3"),
        (["export", "-o", "out.jsonl"], "agents/s", "3/3"),
        (["history", "alpha"], "events/s", "4/4"),
        (["tail"], "agents/s", "3/3"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_progress_bar_with_rate_and_eta_on_a_terminal_only(
    url: str, command: list[str], rate: str, done: str, tmp_path: Path
) -> None:
    # a real process for the first command; the others in this process (the bar
    # follows the environment and stderr of the run, both set the same way there)
    run = sk if command == ["stats"] else sk_in_process
    on_tty = run(
        *command, "--db", url, cwd=tmp_path,
        FORCE_COLOR="1", TTY_INTERACTIVE="1", TERM="xterm", NO_COLOR="",
    )  # fmt: skip
    assert on_tty.returncode == 0, on_tty.stderr
    assert rate in on_tty.stderr and done in on_tty.stderr
    assert rate not in on_tty.stdout
    redirected = run(*command, "--db", url, cwd=tmp_path)
    assert redirected.returncode == 0, redirected.stderr
    assert redirected.stderr == ""


# ------------------------------------------------------------------------- diagram


def test_diagram_draws_boxes_and_arrows(url: str) -> None:
    result = sk_in_process("diagram")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("6 states, 11 rules, starts in idle")
    assert "│ ▶ idle │ ──start_processing──▶ processing" in out
    for state in ("processing", "waiting", "tool_call", "completed", "error"):
        assert f"│ {state}" in out
    assert "──call_tool─────────▶ tool_call" in out
    mermaid = sk_in_process("diagram", "--format", "mermaid")
    assert mermaid.stdout.startswith("stateDiagram-v2")


MY_MACHINE = """
from enum import Enum
from statekeeper.machine import AgentStateMachine, TransitionRule

class S(Enum):
    DRAFT = "draft"
    REVIEW = "review"
    DONE = "done"

def make():
    return AgentStateMachine(
        states=list(S),
        initial=S.DRAFT,
        rules=[
            TransitionRule(S.DRAFT, "submit", S.REVIEW),
            TransitionRule(S.REVIEW, "approve", S.DONE),
            TransitionRule(S.REVIEW, "reject", S.DRAFT),
        ],
    )

machine = make()
"""


@pytest.mark.parametrize("attr", ["machine", "make"])
def test_diagram_of_a_users_machine(tmp_path: Path, attr: str) -> None:
    (tmp_path / "mymachine.py").write_text(MY_MACHINE)
    result = sk("diagram", "--machine", f"mymachine:{attr}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("3 states, 3 rules, starts in draft")
    assert "│ ▶ draft │ ──submit───▶ review" in out
    assert "──reject───▶ draft" in out
    dot = sk_in_process("diagram", "-m", f"mymachine:{attr}", "-f", "dot", cwd=tmp_path)
    assert dot.stdout.startswith("digraph") and "approve" in dot.stdout


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "--machine must be MODULE:ATTR"),
        ("no_such_module_xyz:m", "cannot import module 'no_such_module_xyz'"),
        ("os:path", "os:path is a module, not an AgentStateMachine"),
        ("mymachine:missing", "module 'mymachine' has no attribute 'missing'"),
        ("mymachine:S", "not an AgentStateMachine"),
    ],
)
def test_diagram_bad_machine(tmp_path: Path, spec: str, message: str) -> None:
    (tmp_path / "mymachine.py").write_text(MY_MACHINE)
    result = sk_in_process("diagram", "--machine", spec, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("empty_url", ENGINES, indirect=True)
def test_diagram_overlays_what_the_store_observed(engine_url: str) -> None:
    result = sk_in_process("diagram", "--db", engine_url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "observed: 3 agent(s), 9 event(s)" in out
    assert "──start_processing──▶ processing  ×2" in out
    assert "──call_tool─────────▶ tool_call  ×1" in out
    assert "──await_input───────▶ waiting  ×0" in out
    # idle: 2 agents entered it, both left after 1000 s; processing: 1 agent in it now
    assert "│ now 0 · in 2 │" in out
    assert "│ avg 16m 40s  │" in out
    assert "│ now 1 · in 3 │" in out
    assert_fits(out)
