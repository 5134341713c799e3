"""The summary of a ``retention apply`` run resumed from its progress file counted the
resumed part only: three agents, stopped after two, resumed — "1 agent(s) scanned, 0
on legal hold, 1 action(s)", as if the policy had touched one agent. The progress file
now keeps what the runs before did (beside their failures), and the run that finishes
counts the whole operation and says how it splits; ``--json`` gives the same counts
as ``whole_run``. A progress file written before these were kept says the counts are
the resumed run's only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.governance import retention

from ._retention_resume import apply_keep_last, store_of_three


def _stopped_after_two(url: str, progress: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = retention.apply_retention

    async def stopping(*args: Any, progress: Callable[..., None], **kw: Any) -> Any:
        def step(agent_id: str, scanned: int) -> None:
            progress(agent_id, scanned)
            if scanned == 2:
                raise KeyboardInterrupt  # stopped after acme/a2 (a SIGKILL: the same file)

        return await real_run(*args, progress=step, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(retention, "apply_retention", stopping)
        stopped = apply_keep_last(url, progress)
    assert stopped.code == 130 and progress.exists(), str(stopped)


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_the_resumed_run_counts_the_whole_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_out: bool
) -> None:
    url = store_of_three(tmp_path / "a.db")
    progress = tmp_path / "retention.json"
    _stopped_after_two(url, progress, monkeypatch)
    run = apply_keep_last(url, progress, *(["--json"] if json_out else []))
    assert run.code == 0, str(run)
    if json_out:
        doc = json.loads(run.stdout)
        assert (doc["scanned"], len(doc["actions"])) == (1, 1)  # (this run's, as before)
        assert doc["whole_run"] == {
            "scanned": 3, "held": 0, "actions": 3, "failed": 0, "refused": 0,
            "unsupported": 0, "lost": 0, "skipped": 0,
        }  # fmt: skip
        return
    assert (
        "3 agent(s) scanned, 0 on legal hold, 3 action(s) (the whole run: 1 agent(s) in"
        " this one, 2 before the resume)" in " ".join(run.stdout.split())
    ), run.stdout


def test_an_older_progress_file_says_the_counts_are_this_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = store_of_three(tmp_path / "a.db")
    progress = tmp_path / "retention.json"
    _stopped_after_two(url, progress, monkeypatch)
    doc = json.loads(progress.read_text(encoding="utf-8"))
    del doc["statekeeper_retention"]["done"]  # as written before the counts were kept
    progress.write_text(json.dumps(doc), encoding="utf-8")
    run = apply_keep_last(url, progress)
    assert run.code == 0, str(run)
    shown = " ".join(run.stdout.split())
    assert "1 agent(s) scanned, 0 on legal hold, 1 action(s) (this run's only: the" in shown
    run_json = apply_keep_last(url, progress, "--json")  # (finished: the file is gone, a new run)
    assert "whole_run" not in json.loads(run_json.stdout)
