"""``retention apply`` stopped part-way (Ctrl-C, SIGTERM) has already removed history
from some agents: it says how many, and how to finish (resume with the progress file),
instead of "error: interrupted" alone (Ctrl-C) or nothing at all (SIGTERM)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.store import SyncStateStore

from ..cli._proc import stop_at_gate

SRC = Path(__file__).resolve().parents[2] / "src"

_CHILD = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {src!r})
from statekeeper.governance import retention as mod
from statekeeper.cli import main
real = mod._plan_and_apply
count = [0]
async def _plan_and_apply(*args, **kwargs):
    count[0] += 1
    if count[0] == 5:  # four agents compacted: wait for the signal
        Path({blocked!r}).touch()
        while not Path({go!r}).exists():
            await asyncio.sleep(0.02)
    return await real(*args, **kwargs)
mod._plan_and_apply = _plan_and_apply
main({argv!r})
"""


@pytest.mark.parametrize(
    ("signum", "word", "json_out"),
    [(signal.SIGINT, "interrupted", False), (signal.SIGTERM, "terminated", True)],
    ids=["ctrl-c", "sigterm-json"],
)
def test_a_stopped_retention_run_says_what_it_removed(
    signum: int, word: str, json_out: bool, tmp_path: Path
) -> None:
    db, progress = tmp_path / "s.db", tmp_path / "ret.json"
    with SyncStateStore(f"sqlite:///{db}") as store:
        for a in range(8):
            for i in range(5):
                store.save(f"acme/a{a}", {"n": i})
    argv = ["retention", "apply", "--db", str(db), "--rule", "acme keep_last=1"]
    argv += ["--progress-file", str(progress)]
    blocked, go = tmp_path / "blocked", tmp_path / "go"
    code, out, err = stop_at_gate(
        [
            "-c",
            _CHILD.format(
                src=str(SRC),
                blocked=str(blocked),
                go=str(go),
                argv=argv + (["--json"] if json_out else []),
            ),
        ],
        blocked,
        go,
        signum,
    )
    assert code == 128 + signum, err
    assert err.startswith(
        f"error: {word} after 5 agent(s) scanned: history already removed"
        " from 4 agent(s) (16 event(s)"
    ), err
    assert f"--progress-file {progress}" in err and "Traceback" not in err
    if json_out:
        doc = json.loads(out)
        assert doc["stopped"] == word and doc["agents_changed"] == 4
        assert doc["events_removed"] == 16 and doc["last_agent"] == "acme/a3"
    # resumed: the rest done, the four not scanned again
    again = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *argv, "--json"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "300", "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["resumed_after"] == "acme/a3" and doc["scanned"] == 4
