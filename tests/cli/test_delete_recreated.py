"""``statekeeper delete`` deletes the agent it asked about, not a new agent of the same
id: while the question "Delete agent 'beta' and its 2 event(s)?" waited, another process
deleted beta and made it again with two events of its own. The delete was conditional
on the head shown only (2, again), so the new agent — acknowledged writes no one was
asked about — was deleted, "deleted agent 'beta' (2 event(s))", exit 0."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app


def test_an_agent_made_again_while_the_question_waits_is_not_deleted(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def answered_yes_after_a_new_beta(text: str, *args: Any, **kw: Any) -> bool:
        assert "2 event(s)" in text
        with SyncStateStore(url) as other:  # another process: beta deleted, made again
            other.delete("beta")
            other.save("beta", {"new": 1})
            other.save("beta", {"new": 2})
            assert other.head("beta") == 2  # (the head the question showed)
        return True

    monkeypatch.setattr(typer, "confirm", answered_yes_after_a_new_beta)
    result = runner.invoke(app, ["delete", "beta", "--db", url])
    assert result.exit_code == 1, result.output
    assert "not deleted" in result.output
    with SyncStateStore(url) as store:
        assert store.load("beta").data == {"new": 2}


def test_the_agent_shown_is_still_deleted(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(typer, "confirm", lambda *a, **k: True)
    result = runner.invoke(app, ["delete", "beta", "--db", url])
    assert result.exit_code == 0, result.output
    assert "deleted agent 'beta' (2 event(s))" in result.output
    with SyncStateStore(url) as store:
        assert store.head("beta") == 0
