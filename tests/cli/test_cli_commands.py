"""The inspection commands: output, --json, exit codes, error policy."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore, __version__
from statekeeper.cli import app, main

COMMANDS = ["agents", "show", "history", "verify", "diagram", "delete", "stats", "demo"]


def no_traceback(result: object) -> None:
    text = result.output + (result.stderr or "")  # type: ignore[attr-defined]
    assert "Traceback" not in text


# ------------------------------------------------------------------------------ help


def test_main_is_the_console_entry_point() -> None:
    assert callable(main)


def test_app_help_lists_every_command(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output
    assert "--db" in result.output and "--url" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(runner: CliRunner, command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


# ---------------------------------------------------------------------------- agents


def test_agents_table(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["agents", "--db", url])
    assert result.exit_code == 0, result.output
    for agent in ("alpha", "beta", "gamma"):
        assert agent in result.output
    assert "tool_call" not in result.output  # alpha is back in processing
    assert "processing" in result.output and "completed" in result.output


def test_agents_json(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["agents", "--db", url, "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    rows = {r["agent_id"]: r for r in doc["agents"]}
    assert list(rows) == ["alpha", "beta", "gamma"]
    assert rows["alpha"]["head_seq"] == 4
    assert rows["alpha"]["state"] == "processing"
    assert rows["beta"]["state"] is None
    assert rows["gamma"]["state"] == "completed"
    assert rows["alpha"]["created_at"] == "1970-01-01T00:16:40.000000+00:00"
    assert doc["next_after"] is None


def test_agents_paging(runner: CliRunner, url: str) -> None:
    first = json.loads(runner.invoke(app, ["agents", "--db", url, "--json", "-n", "2"]).stdout)
    assert [r["agent_id"] for r in first["agents"]] == ["alpha", "beta"]
    assert first["next_after"] == "beta"
    second = json.loads(
        runner.invoke(
            app, ["agents", "--db", url, "--json", "-n", "2", "--after", first["next_after"]]
        ).stdout
    )
    assert [r["agent_id"] for r in second["agents"]] == ["gamma"]
    assert second["next_after"] is None
    text = runner.invoke(app, ["agents", "--db", url, "-n", "2"])
    assert "--after beta" in text.output


def test_global_db_option_and_env(runner: CliRunner, url: str, tmp_path: Path) -> None:
    # before the command name
    result = runner.invoke(app, ["--db", url, "agents", "--json"])
    assert len(json.loads(result.stdout)["agents"]) == 3
    # from the environment
    result = runner.invoke(app, ["agents", "--json"], env={"STATEKEEPER_URL": url})
    assert len(json.loads(result.stdout)["agents"]) == 3
    # the command's own --db wins over both
    other = tmp_path / "other.db"
    SyncStateStore(str(other)).close()
    result = runner.invoke(
        app, ["--db", url, "agents", "--db", str(other), "--json"], env={"STATEKEEPER_URL": url}
    )
    assert json.loads(result.stdout)["agents"] == []


def test_agents_empty_memory_store(runner: CliRunner) -> None:
    result = runner.invoke(app, ["agents", "--url", "memory://"])
    assert result.exit_code == 0
    assert "no agents" in result.output


# ------------------------------------------------------------------------- errors


def test_missing_database_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    result = runner.invoke(app, ["agents", "--db", str(missing)])
    assert result.exit_code == 2
    assert "not a statekeeper store" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not missing.exists()  # a reader does not create the file
    no_traceback(result)


def test_statekeeper_error_is_one_red_line_exit_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["agents", "--db", "bogus://localhost/x"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:")
    assert "unknown backend scheme 'bogus'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    no_traceback(result)


def test_unreadable_database_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    result = runner.invoke(app, ["verify", "--db", str(junk)])
    assert result.exit_code == 2
    assert "error:" in result.stderr
    no_traceback(result)


@pytest.mark.parametrize(
    "command",
    [["show", "ghost"], ["history", "ghost"], ["delete", "ghost", "--yes"], ["verify", "ghost"]],
)
def test_unknown_agent_exit_1(runner: CliRunner, url: str, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--db", url])
    assert result.exit_code == 1
    assert "agent 'ghost' not found" in result.stderr
    no_traceback(result)


# ------------------------------------------------------------------------------ show


def test_show_latest(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["show", "alpha", "--db", url])
    assert result.exit_code == 0, result.output
    assert "processing" in result.output
    assert '"task": "research"' in result.output
    assert '"hits": 3' in result.output


def test_show_json(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["show", "alpha", "--db", url, "--json"])
    doc = json.loads(result.stdout)
    assert doc["agent_id"] == "alpha"
    assert doc["seq"] == doc["head_seq"] == 4
    assert doc["state"] == "processing"
    assert doc["data"] == {"task": "research", "results": {"c1": {"hits": 3}}}
    assert doc["updated_at"].startswith("1970-01-01T01:06:40")  # 4000 s


def test_show_at_seq(runner: CliRunner, url: str) -> None:
    doc = json.loads(
        runner.invoke(app, ["show", "alpha", "--db", url, "--at", "2", "--json"]).stdout
    )
    assert doc["seq"] == 2 and doc["head_seq"] == 4
    assert doc["state"] == "processing"
    assert doc["data"] == {"task": "research"}
    text = runner.invoke(app, ["show", "alpha", "--db", url, "--at", "3"])
    assert "tool_call" in text.output and "head is 4" in text.output


@pytest.mark.parametrize("when", ["3500", "1970-01-01T00:58:20+00:00", "1970-01-01T00:58:20Z"])
def test_show_at_time(runner: CliRunner, url: str, when: str) -> None:
    # alpha's events are at 1000, 2000, 3000, 4000: 3500 is after seq 3
    result = runner.invoke(app, ["show", "alpha", "--db", url, "--at-time", when, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seq"] == 3


def test_show_before_the_agent_existed(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["show", "alpha", "--db", url, "--at-time", "500"])
    assert result.exit_code == 1
    assert "did not exist yet at 1970-01-01T00:08:20" in result.stderr
    # the epoch itself is a moment like any other, not "None"
    epoch = runner.invoke(app, ["show", "alpha", "--db", url, "--at-time", "0"])
    assert epoch.exit_code == 1
    assert "did not exist yet at 1970-01-01T00:00:00" in epoch.stderr


def test_show_bad_options(runner: CliRunner, url: str) -> None:
    both = runner.invoke(app, ["show", "alpha", "--db", url, "--at", "1", "--at-time", "5"])
    assert both.exit_code == 2
    bad_time = runner.invoke(app, ["show", "alpha", "--db", url, "--at-time", "yesterday"])
    assert bad_time.exit_code == 2
    assert "ISO 8601" in bad_time.output + bad_time.stderr
    out_of_range = runner.invoke(app, ["show", "alpha", "--db", url, "--at", "99"])
    assert out_of_range.exit_code == 2
    assert "outside 1..4" in out_of_range.stderr
    no_traceback(out_of_range)


# --------------------------------------------------------------------------- history


def test_history_table(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["history", "alpha", "--db", url])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "created",
        "start_processing",
        "call_tool",
        "receive_result",
        "idle → processing",
        "processing → tool_call",
        "search",
    ):
        assert text in out
    assert "seq 1–4 of 4" in out


def test_history_json_lines(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["history", "alpha", "--db", url, "--json"])
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["seq"] for e in lines] == [1, 2, 3, 4]
    assert lines[0]["type"] == "created"
    call = lines[2]
    assert call["event"] == "call_tool"
    assert (call["from"], call["to"]) == ("processing", "tool_call")
    assert call["info"]["metadata"] == {"tool": "search", "call_id": "c1"}
    assert call["time"] == "1970-01-01T00:50:00.000000+00:00"
    assert lines[3]["ops"] == [{"op": "add", "path": "/results", "value": {"c1": {"hits": 3}}}]


def test_history_after_and_limit(runner: CliRunner, url: str) -> None:
    result = runner.invoke(
        app, ["history", "alpha", "--db", url, "--after", "1", "--limit", "2", "--json"]
    )
    assert [json.loads(x)["seq"] for x in result.stdout.splitlines()] == [2, 3]
    beyond = runner.invoke(app, ["history", "alpha", "--db", url, "--after", "4"])
    assert beyond.exit_code == 0
    assert "no events after seq 4" in beyond.output


# ---------------------------------------------------------------------------- verify


def test_verify_ok(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["verify", "--db", url])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output and "3 agent(s)" in result.output
    doc = json.loads(runner.invoke(app, ["verify", "--db", url, "--json"]).stdout)
    assert doc == {
        "ok": True,
        "agents": 3,
        "events": 9,
        "snapshots": doc["snapshots"],
        "problems": [],
    }
    assert doc["snapshots"] >= 1


def _tamper(path: Path, agent: str, seq: int) -> None:
    conn = sqlite3.connect(path)
    try:
        (payload,) = conn.execute(
            "SELECT payload FROM sk_events WHERE agent_id = ? AND seq = ?", (agent, seq)
        ).fetchone()
        forged = bytes(payload).replace(b"search", b"SEARCH")
        assert forged != bytes(payload)
        conn.execute(
            "UPDATE sk_events SET payload = ? WHERE agent_id = ? AND seq = ?", (forged, agent, seq)
        )
        conn.commit()
    finally:
        conn.close()


def test_verify_detects_tampered_payload(runner: CliRunner, db: Path, url: str) -> None:
    _tamper(db, "alpha", 3)
    result = runner.invoke(app, ["verify", "--db", url])
    assert result.exit_code == 1
    assert "Problems" in result.output
    assert "alpha" in result.output and "checksum mismatch" in result.output
    assert "1 problem(s)" in result.output
    doc = json.loads(runner.invoke(app, ["verify", "--db", url, "--json"]).stdout)
    assert doc["ok"] is False
    assert [(p["agent_id"], p["seq"]) for p in doc["problems"]] == [("alpha", 3)]
    # other agents still verify on their own
    assert runner.invoke(app, ["verify", "beta", "gamma", "--db", url]).exit_code == 0
    assert runner.invoke(app, ["verify", "alpha", "--db", url, "--json"]).exit_code == 1


def test_verify_detects_payload_rewritten_as_text(runner: CliRunner, db: Path, url: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE sk_events SET payload = replace(payload, 'search', 'SEARCH') "
        "WHERE agent_id = 'alpha' AND seq = 3"
    )
    conn.commit()
    conn.close()
    result = runner.invoke(app, ["verify", "--db", url, "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"][0]["seq"] == 3


# --------------------------------------------------------------------------- diagram


def test_diagram_mermaid(runner: CliRunner) -> None:
    result = runner.invoke(app, ["diagram", "--format", "mermaid"])
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("stateDiagram-v2")
    assert "[*] -->" in out  # not eaten as markup
    for text in (
        "idle",
        "processing",
        "waiting",
        "tool_call",
        "error",
        "completed",
        "call_tool",
        "receive_result",
        "recover",
        "reset",
    ):
        assert text in out
    assert out.count("-->") >= 12


def test_diagram_dot(runner: CliRunner) -> None:
    result = runner.invoke(app, ["diagram", "--format", "dot"])
    assert result.exit_code == 0
    assert result.stdout.startswith("digraph")
    assert 'label="call_tool"' in result.stdout
    assert runner.invoke(app, ["diagram", "--format", "png"]).exit_code == 2


# ---------------------------------------------------------------------------- delete


def test_delete_asks_first(runner: CliRunner, url: str) -> None:
    declined = runner.invoke(app, ["delete", "beta", "--db", url], input="n\n")
    assert declined.exit_code == 1
    assert "2 event(s)" in declined.output
    assert runner.invoke(app, ["show", "beta", "--db", url]).exit_code == 0
    accepted = runner.invoke(app, ["delete", "beta", "--db", url], input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "deleted agent 'beta'" in accepted.output
    assert runner.invoke(app, ["show", "beta", "--db", url]).exit_code == 1


def test_delete_yes(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["delete", "gamma", "--db", url, "--yes"])
    assert result.exit_code == 0
    doc = json.loads(runner.invoke(app, ["agents", "--db", url, "--json"]).stdout)
    assert [a["agent_id"] for a in doc["agents"]] == ["alpha", "beta"]


# ----------------------------------------------------------------------------- stats


def test_stats(runner: CliRunner, url: str) -> None:
    doc = json.loads(runner.invoke(app, ["stats", "--db", url, "--json"]).stdout)
    assert doc["agents"] == 3 and doc["events"] == 9
    assert doc["states"] == {"-": 1, "completed": 1, "processing": 1}
    assert doc["backend"] == "sqlite" and doc["healthy"] is True
    text = runner.invoke(app, ["stats", "--db", url])
    assert text.exit_code == 0 and "completed" in text.output
