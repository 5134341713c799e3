"""The crash/recover demo: the agent, its tools, and end-to-end runs with a real SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import AgentState, AgentStateMachine, StateStore, SyncStateStore
from statekeeper.cli import app
from statekeeper.demo.agent import drive, initial_data, next_action, planned_calls
from statekeeper.demo.constants import FIRST_RESULT_SEQ, TOOL_CALLS, TOTAL_EVENTS
from statekeeper.demo.tools import ToolBox, read_tool_log, tool_calculator, write_corpus

# ------------------------------------------------------------------ agent and tools


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    write_corpus(folder / "corpus")
    return folder


def toolbox(files: Path, agent_id: str = "a1") -> ToolBox:
    return ToolBox(files / "corpus", files / "tools.log", agent_id)


def test_planner_starts_with_a_search() -> None:
    action = next_action(initial_data())
    assert action == {
        "call_id": "call-01-search",
        "tool": "search",
        "args": {"query": "city population area"},
    }


def test_calculator_is_arithmetic_only(tmp_path: Path) -> None:
    assert tool_calculator(tmp_path, "(1 + 2) * 3 / 2")["value"] == 4.5
    with pytest.raises(ValueError):
        tool_calculator(tmp_path, "__import__('os').getpid()")


def test_tool_log_ignores_a_torn_last_line(files: Path) -> None:
    tools = toolbox(files)
    tools.invoke("call-01-search", "search", {"query": "city population area"})
    with open(files / "tools.log", "a") as fh:
        fh.write('{"agent_id": "a1", "call_')
    assert len(read_tool_log(files / "tools.log")) == 1


async def _run_to_completion(url: str, files: Path, agent_id: str = "a1") -> None:
    async with StateStore(url) as store:
        agent = await store.agent(agent_id, AgentStateMachine(), initial_data=initial_data())
        await drive(agent, toolbox(files, agent_id), actor="test")


def test_full_run_in_process(files: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    asyncio.run(_run_to_completion(url, files))
    with SyncStateStore(url) as store:
        snap = store.load("a1")
        events = list(store.history("a1"))
    assert snap.fsm_state == "completed"
    assert len(events) == snap.seq == TOTAL_EVENTS
    assert events[FIRST_RESULT_SEQ - 1].info["event"] == "receive_result"
    assert "Brightwater is the most densely populated" in snap.data["answer"]
    assert len(snap.data["results"]) == TOOL_CALLS
    assert [c["call_id"] for c in planned_calls(snap.data)] == sorted(snap.data["results"])
    log = toolbox(files).entries()
    assert [e["run"] for e in log] == ["executed"] * TOOL_CALLS
    assert len({e["call_id"] for e in log}) == TOOL_CALLS


class Crash(Exception):
    """Stands in for the process stopping right after a commit (in-process test)."""


@pytest.mark.parametrize("crash_at", [FIRST_RESULT_SEQ, 9, 10, TOTAL_EVENTS - 1])
def test_resume_never_repeats_a_completed_call(files: Path, tmp_path: Path, crash_at: int) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"

    async def first() -> None:
        def stop(agent: Any, info: dict[str, Any]) -> None:
            if info["seq"] == crash_at:
                raise Crash

        async with StateStore(url) as store:
            agent = await store.agent("a1", AgentStateMachine(), initial_data=initial_data())
            with pytest.raises(Crash):
                await drive(agent, toolbox(files), actor="first", on_commit=stop)

    asyncio.run(first())
    done_before = {e["call_id"] for e in toolbox(files).entries()}
    asyncio.run(_run_to_completion(url, files))
    log = toolbox(files).entries()
    counts = Counter(e["call_id"] for e in log)
    assert len(counts) == TOOL_CALLS and set(counts.values()) == {1}
    assert all(e["run"] == "executed" for e in log)
    assert len(done_before) >= 1


def test_in_flight_call_is_replayed_not_reexecuted(files: Path, tmp_path: Path) -> None:
    """The crash window no store can close: the tool ran, its result was not stored.

    The call's intent (``call_tool`` with its call_id) is stored, so the resumed agent
    re-invokes with the same call_id, and the tool answers from its idempotency record.
    """
    url = f"sqlite:///{tmp_path / 'a.db'}"

    async def first() -> None:
        def stop(agent: Any, info: dict[str, Any]) -> None:
            if info["event"] == "call_tool" and info["call_id"] == "call-03-fetch":
                # the tool runs, then the process dies before the result is appended
                toolbox(files).invoke(info["call_id"], info["tool"], info["args"])
                raise Crash

        async with StateStore(url) as store:
            agent = await store.agent("a1", AgentStateMachine(), initial_data=initial_data())
            with pytest.raises(Crash):
                await drive(agent, toolbox(files), actor="first", on_commit=stop)

    asyncio.run(first())
    with SyncStateStore(url) as store:
        mid = store.load("a1")
    assert mid.fsm_state == AgentState.TOOL_CALL.value
    assert mid.data["pending"]["call_id"] == "call-03-fetch"
    assert "call-03-fetch" not in mid.data["results"]
    asyncio.run(_run_to_completion(url, files))
    runs = [(e["call_id"], e["run"]) for e in toolbox(files).entries()]
    assert runs.count(("call-03-fetch", "executed")) == 1
    assert runs.count(("call-03-fetch", "replayed")) == 1
    executed = Counter(c for c, r in runs if r == "executed")
    assert len(executed) == TOOL_CALLS and set(executed.values()) == {1}


# -------------------------------------------------------------- end to end (SIGKILL)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEKEEPER_URL"}
    env["COLUMNS"] = "120"
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.slow
def test_demo_end_to_end_sigkill_and_resume(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    kill_after = 9  # right after the call_tool of the 3rd fetch: a call is in flight
    proc = _cli(
        "demo", "--db", str(db), "--kill-after", str(kill_after), "--step-delay", "0.02", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)

    # the child was killed by SIGKILL, after the chosen seq and before the end
    worker = out["worker"]
    assert worker["returncode"] == -signal.SIGKILL and worker["signal"] == "SIGKILL"
    assert kill_after <= worker["last_seq"] < TOTAL_EVENTS
    assert out["resumed_by_pid"] not in (0, worker["pid"])

    # resumed from where the store says it was
    rec = out["recovered"]
    assert rec["seq"] == worker["last_seq"]
    assert rec["state"] in ("tool_call", "processing")
    assert rec["step"] >= 1 and rec["tool_calls_done"][0] == "call-01-search"
    assert rec["snapshot_seq"] + rec["events_replayed"] == rec["seq"]
    assert 0 < out["recovery_ms"] < 5000

    # completed
    assert out["final"]["state"] == "completed" and out["final"]["seq"] == TOTAL_EVENTS
    assert "Brightwater" in out["final"]["answer"]
    assert all(out["checks"].values()) and out["ok"] is True

    # every tool call ran exactly once; completed ones were not touched after the crash
    calls = out["tool_calls"]
    assert len(calls) == TOOL_CALLS
    assert all(c["executed"] == 1 for c in calls)
    before = [c for c in calls if c["completed_before_crash"]]
    assert before and all(c["invoked_after_crash"] == 0 for c in before)
    assert all(c["executed_by"] == ["worker"] for c in before)
    assert len(before) == len(rec["tool_calls_done"])

    # the timeline: worker events, then resumed events, gap-free
    timeline = out["timeline"]
    assert [t["seq"] for t in timeline] == list(range(1, TOTAL_EVENTS + 1))
    by = [(t["actor"] or "").split(":")[0] for t in timeline[1:]]
    assert by == ["worker"] * (worker["last_seq"] - 1) + ["resume"] * (
        TOTAL_EVENTS - worker["last_seq"]
    )

    # check the evidence independently of the demo's own verdict
    log = [e for e in read_tool_log(Path(out["tool_log"])) if e["run"] == "executed"]
    assert Counter(e["call_id"] for e in log) == Counter({c["call_id"]: 1 for c in calls})
    assert {e["pid"] for e in log} == {worker["pid"], out["resumed_by_pid"]}
    with SyncStateStore(str(db)) as store:
        assert store.load(out["agent_id"]).fsm_state == "completed"
        assert store.verify().ok


@pytest.mark.slow
def test_demo_text_output(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["demo", "--db", str(tmp_path / "d.db"), "--kill-after", "6", "--step-delay", "0.01"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "SIGKILL",
        "Timeline",
        "Recovered position",
        "recovery time",
        " ms",
        "Tool calls",
        "call-01-search",
        "every tool call ran exactly once",
    ):
        assert text in out, text


@pytest.mark.slow
def test_demo_checks_catch_a_resume_that_forgets_results(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "demo",
            "--db",
            str(tmp_path / "d.db"),
            "--kill-after",
            "8",
            "--step-delay",
            "0.01",
            "--simulate-amnesia",
            "--json",
        ],
    )
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["ok"] is False
    assert out["checks"]["no_completed_call_repeated_after_crash"] is False
    assert out["checks"]["worker_killed_by_sigkill"] is True


@pytest.mark.slow
def test_demo_keep_and_fresh(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    args = ["demo", "--db", str(db), "--step-delay", "0.01", "--seed", "1", "--json"]
    first = json.loads(runner.invoke(app, args).stdout)
    second = runner.invoke(app, [*args, "--keep"])
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["agent_id"] == "demo-research-2"
    with SyncStateStore(str(db)) as store:
        assert [a.agent_id for a in store.list_agents()] == [first["agent_id"], "demo-research-2"]
    third = json.loads(runner.invoke(app, args).stdout)  # fresh again
    assert third["agent_id"] == "demo-research-1"
    with SyncStateStore(str(db)) as store:
        assert store.count_agents() == 1


def test_demo_refuses_to_wipe_a_foreign_store(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    with SyncStateStore(str(db)) as store:
        store.save("precious", {"x": 1})
    result = runner.invoke(app, ["demo", "--db", str(db)])
    assert result.exit_code == 2
    assert "refusing to wipe" in result.stderr
    with SyncStateStore(str(db)) as store:
        assert store.load("precious").data == {"x": 1}


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm", ".sk-witness"])
def test_demo_leaves_files_beside_a_missing_database_alone(
    runner: CliRunner, tmp_path: Path, suffix: str
) -> None:
    """``--db diary`` with no ``diary`` but a ``diary-journal`` of the user's: the demo
    deleted it (every side-file name of its database, whoever made it) and went on."""
    db = tmp_path / "diary"
    mine = tmp_path / f"diary{suffix}"
    mine.write_text("my notes\n", encoding="utf-8")
    result = runner.invoke(app, ["demo", "--db", str(db), "--step-delay", "0.01", "--seed", "1"])
    assert result.exit_code == 2, result.output
    assert "refusing to touch" in result.stderr and mine.name in result.stderr
    assert mine.read_text(encoding="utf-8") == "my notes\n"
    assert not db.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--kill-after", str(FIRST_RESULT_SEQ - 1)],
        ["--kill-after", str(TOTAL_EVENTS)],
        ["--db", "memory://"],
    ],
)
def test_demo_bad_options(runner: CliRunner, tmp_path: Path, args: list[str]) -> None:
    base = ["demo", "--db", str(tmp_path / "d.db")]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:")


def test_worker_module_runs_without_double_import() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "statekeeper.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--kill-after" not in proc.stdout and "--url" in proc.stdout
