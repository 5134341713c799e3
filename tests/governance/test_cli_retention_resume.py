"""``retention apply --progress-file`` resumes only the run it was written for: the
same store and the same policy. A progress file names the last agent done; resumed
on another store (an ops script that passes the same ``--progress-file`` to every
store) or with another policy, the agents up to it were skipped without a word (exit
0, "1 agent(s) scanned"): they never got the policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.governance import retention

from ..cli._subprocess import Run, cli_in_process, one_error_line

AGENTS = ("acme/a1", "acme/a2", "acme/a3")


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    store = SyncStateStore(url)
    try:
        for agent in AGENTS:
            for n in range(3):
                store.save(agent, {"n": n})
    finally:
        store.close()
    return url


def _heads_kept(url: str) -> dict[str, int]:
    """How many events each agent still holds (3 before retention, 1 after)."""
    store = SyncStateStore(url)
    try:
        return {a: store.stored_size(a).events for a in AGENTS}
    finally:
        store.close()


def _apply(url: str, progress: Path, rule: str = "acme keep_last=1") -> Run:
    return cli_in_process(
        "retention", "apply", "--db", url, "--rule", rule, "--progress-file", str(progress)
    )


@pytest.fixture
def interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """Store A and the progress file of a run on it stopped after its first agent."""
    url = _store(tmp_path / "a.db")
    progress = tmp_path / "retention.json"
    real = retention.apply_retention

    async def stopping(*args: Any, progress: Callable[..., None], **kw: Any) -> Any:
        def step(agent_id: str, scanned: int) -> None:
            progress(agent_id, scanned)
            raise KeyboardInterrupt  # Ctrl-C after the first agent is done

        return await real(*args, progress=step, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(retention, "apply_retention", stopping)
        stopped = _apply(url, progress)
    assert stopped.code != 0 and progress.exists(), str(stopped)
    assert _heads_kept(url) == {"acme/a1": 1, "acme/a2": 3, "acme/a3": 3}
    return url, progress


def test_a_progress_file_is_not_resumed_on_another_store(
    interrupted: tuple[str, Path], tmp_path: Path
) -> None:
    _, progress = interrupted
    other = _store(tmp_path / "b.db")
    run = _apply(other, progress)
    assert run.code == 2, str(run)
    assert "another store" in one_error_line(run)
    assert _heads_kept(other) == dict.fromkeys(AGENTS, 3)  # nothing done
    assert progress.exists()


def test_a_progress_file_is_not_resumed_with_another_policy(
    interrupted: tuple[str, Path],
) -> None:
    url, progress = interrupted
    run = _apply(url, progress, rule="acme keep_last=2")
    assert run.code == 2, str(run)
    assert "another policy" in one_error_line(run)
    assert progress.exists()


def test_the_same_run_resumes_and_says_so(interrupted: tuple[str, Path]) -> None:
    url, progress = interrupted
    run = _apply(url, progress)
    assert run.code == 0, str(run)
    assert "resumed after 'acme/a1'" in run.stdout
    assert _heads_kept(url) == dict.fromkeys(AGENTS, 1)
    assert not progress.exists()
    as_json = cli_in_process(
        "retention", "apply", "--db", url, "--rule", "acme keep_last=1", "--json"
    )
    assert json.loads(as_json.stdout)["resumed_after"] is None
