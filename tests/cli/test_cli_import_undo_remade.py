"""A failed import's undo deletes the agent it wrote, not another process's stream
made under the same id up to the same seq since.

``statekeeper import`` deletes an agent it created again when the agent's read-back
fails (see ``test_cli_import_end_line``). That delete was conditional on the head seq
alone: when another process deleted the agent and wrote it again up to the same seq
between the import's write and its undo, the undo deleted the other process's
acknowledged writes (no error: "the agent was deleted again"). It is now conditional
on the head event the import wrote (its seq and stored checksum).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app, transfer


def _edited_export(runner: CliRunner, url: str, tmp_path: Path) -> Path:
    """An export of ``alpha`` (4 events) whose end line lies: its read-back fails."""
    exported = tmp_path / "alpha.jsonl"
    assert runner.invoke(app, ["export", "alpha", "--db", url, "-o", str(exported)]).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    del lines[-1]["complete"]["sha256"]  # edited by hand: no digest (as an older export)
    next(line for line in lines if "end" in line)["state"] = "completed"
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return edited


def test_the_undo_keeps_a_stream_made_again_to_the_same_seq(
    runner: CliRunner, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    edited = _edited_export(runner, url, tmp_path)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    check = transfer._check
    remade: list[int] = []

    async def remade_before_the_read_back(store: StateStore, agent: Any) -> None:
        # another process, between the import's write and its read-back (and undo):
        # deletes the agent and writes its own up to the same seq
        head = await store.head(agent.agent_id)
        async with StateStore(target) as other:
            await other.delete(agent.agent_id)
            await other.create(agent.agent_id, {"theirs": 1})
            for n in range(2, head + 1):
                await other.save(agent.agent_id, {"theirs": n})
            remade.append(await other.head(agent.agent_id))
        await check(store, agent)

    monkeypatch.setattr(transfer, "_check", remade_before_the_read_back)
    result = runner.invoke(app, ["import", str(edited), "--db", target])
    assert result.exit_code == 2, result.output
    assert remade == [4]  # made again to the head the import wrote
    said = " ".join(result.stderr.split())
    assert "the agent was not deleted again: it was written since the import wrote it" in said
    assert "statekeeper delete" not in said  # (no undo offered: it is not the file's agent)
    shown = runner.invoke(app, ["show", "alpha", "--db", target, "--json"])
    assert shown.exit_code == 0, shown.output  # the other process's stream is kept
    assert json.loads(shown.stdout)["data"] == {"theirs": 4}


def test_the_undo_still_deletes_the_agent_it_wrote(
    runner: CliRunner, url: str, tmp_path: Path
) -> None:
    """Control: nothing made meanwhile, the failed import's agent is deleted again."""
    edited = _edited_export(runner, url, tmp_path)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    result = runner.invoke(app, ["import", str(edited), "--db", target])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "the agent was deleted again: the failed import left it absent, as it was" in said
    shown = runner.invoke(app, ["show", "alpha", "--db", target])
    assert shown.exit_code == 1 and "not found" in shown.output
