"""``statekeeper delete --yes`` reads a :class:`ConflictError` of its delete as "written
since it was counted" only when it names the agent deleted. A conflict naming another
stream (the audit log's, a tiered store's demoted-agent marker, an intent) is that
failure, reported as it is (the error's exit code, 2, and the stream named), not
sent again.

Before, any ConflictError was "the agent written since": its ``current_seq`` — another
stream's head — became the head the next delete was made at, and after the tries the
command printed "agent 'beta' was written since it was counted (head seq 9, not 2)" of
an agent nobody had written."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.errors import ConflictError
from statekeeper.store.store import StateStore

OTHER = "\x01sk-audit"  # (another stream: the audit log's id space)


def test_a_conflict_on_another_stream_is_not_written_since(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [0]

    async def conflict_elsewhere(self: Any, agent_id: str, *args: Any, **kw: Any) -> bool:
        calls[0] += 1
        raise ConflictError(OTHER, 5, 9)

    monkeypatch.setattr(StateStore, "delete", conflict_elsewhere)
    result = runner.invoke(app, ["delete", "beta", "--db", url, "--yes"])
    monkeypatch.undo()
    assert result.exit_code == 2, result.output  # main: 1
    assert "written since" not in result.output  # main: "...written since it was counted"
    assert "'\\x01sk-audit': expected head seq 5, stored head is 9" in result.output
    assert calls[0] == 1  # (main: 8 tries, each at the other stream's head)
    with SyncStateStore(url) as store:
        assert store.head("beta") == 2  # nothing deleted


def test_asked_a_conflict_on_another_stream_is_not_written_since(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without ``--yes`` (:func:`~statekeeper.store.delete_shown.delete_shown`,
    the inspector's *Delete* form's too): was "written since it was shown"."""

    async def conflict_elsewhere(self: Any, agent_id: str, *args: Any, **kw: Any) -> bool:
        raise ConflictError(OTHER, 5, 9)

    monkeypatch.setattr(typer, "confirm", lambda *args, **kw: True)
    monkeypatch.setattr(StateStore, "delete", conflict_elsewhere)
    result = runner.invoke(app, ["delete", "beta", "--db", url])
    monkeypatch.undo()
    assert result.exit_code == 2, result.output  # main: 1
    assert "written since" not in result.output  # main: "...written since it was shown"
    assert "'\\x01sk-audit': expected head seq 5, stored head is 9" in result.output
    with SyncStateStore(url) as store:
        assert store.head("beta") == 2


def test_a_conflict_on_the_agent_is_still_written_since(
    runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def always_moved(self: Any, agent_id: str, *args: Any, **kw: Any) -> bool:
        raise ConflictError(agent_id, 2, 3)

    monkeypatch.setattr(StateStore, "delete", always_moved)
    result = runner.invoke(app, ["delete", "beta", "--db", url, "--yes"])
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    assert "written since it was counted (head seq 3, not 2)" in result.output
