"""A store closed as Python exits — a non-daemon thread still saving when the main
thread ended, so the store's last close runs after the interpreter has shut its thread
pools — lost its last witness marks: "cannot write the witness file … (1 mark(s) not
written): cannot schedule new futures after shutdown" (trialsync). The data was stored,
but the file that tells a rollback of it was left behind, below the saves acknowledged
last. The marks are now written on the loop when no thread takes the work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import sys, threading
from statekeeper import SyncStateStore
s = SyncStateStore(sys.argv[1], durability="group", flush_interval=3600, flush_size=100000)
for j in range(50):
    s.save("exit-a", {"j": j})
def late():  # still saving when the main thread ends
    for j in range(50, 60):
        s.save("exit-a", {"j": j})
threading.Thread(target=late).start()
"""


def test_the_last_saves_of_a_thread_running_at_exit_are_marked_in_the_witness(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "cannot write the witness file" not in done.stderr, done.stderr
    witness = json.loads(Path(f"{db}.sk-witness").read_text())
    marks = {e["agent_id"]: e["seq"] for e in witness["streams"]}
    assert marks["exit-a"] == 60
