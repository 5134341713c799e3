"""An export whose end line disagrees with its own events (a hand-edited file) fails
the import's read-back, and the error says what differs, instead of a bare "imported
head state differs from the file" that reads like damage to the store. The agent the
failed import created is deleted again: before, it stayed stored as the file's events
said, so a failed import had changed the store."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper.cli import app


def test_an_end_line_that_lies_is_named(runner: CliRunner, url: str, tmp_path: Path) -> None:
    exported = tmp_path / "alpha.jsonl"
    assert runner.invoke(app, ["export", "alpha", "--db", url, "-o", str(exported)]).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    del lines[-1]["complete"]["sha256"]  # edited by hand: no digest (as an older export)
    end = next(line for line in lines if "end" in line)
    assert end["state"] == "processing"
    end["state"] = "completed"  # the events say processing
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    result = runner.invoke(app, ["import", str(edited), "--db", target])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "state (the file's end line says 'completed', its events give 'processing')" in said
    assert "the agent was deleted again: the failed import left it absent, as it was" in said
    shown = runner.invoke(app, ["show", "alpha", "--db", target])
    assert shown.exit_code == 1 and "not found" in shown.output  # as the message says
    listed = runner.invoke(app, ["agents", "--db", target, "--json"])
    assert json.loads(listed.stdout)["agents"] == []
    verified = runner.invoke(app, ["verify", "--db", target])
    assert verified.exit_code == 0, verified.output
    # the file fixed, the same import goes through: nothing of the failed one is left
    end["state"] = "processing"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    again = runner.invoke(app, ["import", str(edited), "--db", target])
    assert again.exit_code == 0, again.output


def test_an_agent_that_cannot_be_deleted_again_is_said_to_be_kept(
    runner: CliRunner, url: str, tmp_path: Path
) -> None:
    """A legal hold on the namespace keeps the agent: the message says it is stored as
    the file's events say, why it was not deleted, and the command that undoes it."""
    exported = tmp_path / "alpha.jsonl"
    assert runner.invoke(app, ["export", "alpha", "--db", url, "-o", str(exported)]).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    del lines[-1]["complete"]["sha256"]  # edited by hand: no digest (as an older export)
    next(line for line in lines if "end" in line)["state"] = "completed"
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    held = runner.invoke(app, ["hold", "add", "alpha", "--reason", "a matter", "--db", target])
    assert held.exit_code == 0, held.output
    result = runner.invoke(app, ["import", str(edited), "--db", target])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "the agent is stored as the file's events say: deleting it again failed" in said
    assert (
        "statekeeper delete alpha --at 4:" in said
    )  # (at the head it wrote: test_cli_import_undo_at)
    shown = runner.invoke(app, ["show", "alpha", "--db", target, "--json"])
    assert json.loads(shown.stdout)["state"] == "processing"  # as the message says
