"""``statekeeper retention apply`` while another run holds the store's run lock, or the
progress file given: refused in one line (exit 2, as the CLI's other refusals), nothing
changed, the other run's progress file untouched. Was: both runs went ahead, and two runs
sharing a progress file wrote their resume points over each other's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from statekeeper import SyncStateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.cli.progress_lock import progress_held
from statekeeper.errors import ProgressFileBusy
from statekeeper.governance import retention_lock as rl

from ..cli._subprocess import Run, cli_in_process, one_error_line

AGENTS = ("acme/a1", "acme/a2")


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    with SyncStateStore(url) as store:
        for agent in AGENTS:
            for n in range(3):
                store.save(agent, {"n": n})
    return url


def _events(url: str) -> list[int]:
    with SyncStateStore(url) as store:
        return [store.stored_size(a).events for a in AGENTS]


def _apply(url: str, *more: str) -> Run:
    return cli_in_process("retention", "apply", "--db", url, "--rule", "acme keep_last=1", *more)


def test_a_run_while_another_holds_the_store_is_refused_in_one_line(tmp_path: Path) -> None:
    url = _store(tmp_path / "s.db")

    async def take() -> None:  # another run, on another machine, in its plan
        backend = SQLiteBackend(str(tmp_path / "s.db"))
        try:
            await backend.acquire_lease(rl.lock_id(""), "retention run pid 7 on box (ab)", 600)
        finally:
            await backend.close()

    asyncio.run(take())
    run = _apply(url)
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert "another retention run holds the run lock of the store" in line
    assert "retention run pid 7 on box (ab)" in line and "UTC" in line
    assert _events(url) == [3, 3]
    dry = _apply(url, "--dry-run")  # a dry run takes no lock
    assert dry.code == 0, str(dry)


def test_two_runs_sharing_one_progress_file_the_second_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    url = _store(tmp_path / "s.db")
    progress = tmp_path / "retention.json"
    recorded = {"statekeeper_retention": {"after": "acme/a1", "namespace": ""}}
    progress.write_text(json.dumps(recorded), encoding="utf-8")
    with progress_held(progress):  # the run using it
        run = _apply(url, "--progress-file", str(progress))
        assert run.code == 2, str(run)
        line = one_error_line(run)
        assert f"{progress} is in use by a running retention run (pid " in line
        assert json.loads(progress.read_text(encoding="utf-8")) == recorded  # untouched
        assert _events(url) == [3, 3]
        with pytest.raises(ProgressFileBusy) as busy, progress_held(progress):
            pass
        assert busy.value.progress_file == str(progress)
        dry = _apply(url, "--progress-file", str(progress), "--dry-run")  # reads no file
        assert dry.code == 0, str(dry)
    done = _apply(url, "--progress-file", str(progress))  # released: the run resumes
    assert done.code == 0, str(done)
    assert _events(url) == [3, 1]  # after acme/a1, as the file says


def test_an_engine_without_leases_says_its_run_held_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _store(tmp_path / "s.db")
    monkeypatch.setattr(SQLiteBackend, "supports_leases", False)
    run = _apply(url)
    assert run.code == 0, str(run)
    assert "warning: this run held no run lock" in run.stderr
    assert "the engine has no leases" in run.stderr
    assert _events(url) == [1, 1]
