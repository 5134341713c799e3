"""``statekeeper delete`` deletes what it asked about: it asked "Delete agent 'beta'
and its 2 event(s)?", and a writer that saved the agent while the question waited (or
deleted it and made it again) had its acknowledged write deleted with the rest, the
answer printing "(2 event(s))". Now the delete is made only at the head it showed
(else nothing is deleted, exit 1); with ``--yes`` (no question) it deletes the agent as
it finds it and prints the events it deleted."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app, delete_cmd
from statekeeper.cli import commands as cli_commands


def _write(url: str) -> None:
    with SyncStateStore(url) as other:  # another process's acknowledged save
        other.save("beta", {"n": 3})


def test_a_write_while_the_question_waits_is_not_deleted(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def answered_yes_after_a_write(text: str, *args: Any, **kw: Any) -> bool:
        assert "2 event(s)" in text
        _write(url)
        return True

    monkeypatch.setattr(typer, "confirm", answered_yes_after_a_write)
    result = runner.invoke(app, ["delete", "beta", "--db", url])
    assert result.exit_code == 1, result.output
    assert "written since" in result.output and "not deleted" in result.output
    with SyncStateStore(url) as store:
        assert store.load("beta").data == {"n": 3}


def test_with_yes_the_count_printed_is_what_was_deleted(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = cli_commands._require

    async def counted_then_written(store: Any, agent_id: str) -> int:
        head = await counted(store, agent_id)
        _write(url)
        return head

    monkeypatch.setattr(delete_cmd, "_require", counted_then_written)
    result = runner.invoke(app, ["delete", "beta", "--db", url, "--yes"])
    assert result.exit_code == 0, result.output
    assert "deleted agent 'beta' (3 event(s))" in result.output
    with SyncStateStore(url) as store:
        assert store.head("beta") == 0
