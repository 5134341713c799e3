"""A retention run resumed from its progress file still says what failed before it
stopped: an action that failed (or was refused, or an agent found lost) in the run
that was stopped (Ctrl-C, SIGTERM, a SIGKILL: the progress file is written after each
agent) was never reported by it, and the resumed run started after it, printed its
own actions only and exited 0 — a failed compaction or purge passed for done."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.errors import BackendError
from statekeeper.governance import retention

from ._retention_resume import apply_keep_last, store_of_three


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_failure_before_the_stop_is_reported_by_the_resumed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_out: bool
) -> None:
    url = store_of_three(tmp_path / "a.db")
    progress = tmp_path / "retention.json"
    real_run, real_plan = retention.apply_retention, retention._plan_and_apply

    async def failing_a1(store: Any, rule: Any, agent_id: str, *args: Any) -> Any:
        if agent_id == "acme/a1":
            raise BackendError("the disk said no")
        return await real_plan(store, rule, agent_id, *args)

    async def stopping(*args: Any, progress: Callable[..., None], **kw: Any) -> Any:
        def step(agent_id: str, scanned: int) -> None:
            progress(agent_id, scanned)
            if scanned == 2:
                raise KeyboardInterrupt  # stopped after acme/a2 (a SIGKILL: the same file)

        return await real_run(*args, progress=step, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(retention, "_plan_and_apply", failing_a1)
        patched.setattr(retention, "apply_retention", stopping)
        stopped = apply_keep_last(url, progress)
    assert stopped.code == 130 and progress.exists(), str(stopped)

    run = apply_keep_last(url, progress, *(["--json"] if json_out else []))
    assert run.code == 1, str(run)  # an action failed: the run as a whole did not succeed
    if json_out:
        doc = json.loads(run.stdout)
        assert doc["before_resume"] == {"failed": 1, "refused": 0, "lost": 0, "agents": ["acme/a1"]}
    else:
        assert "before the resume: 1 failed" in run.stdout and "acme/a1" in run.stdout
    assert not progress.exists()
