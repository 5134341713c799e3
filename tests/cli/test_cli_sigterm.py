"""SIGTERM (``timeout``, ``kill``, a service manager stopping a job) ends a command as
Ctrl-C does: by an exception, so its ``finally`` blocks run. (Before: the process
vanished mid-export and left ``.agents.jsonl.<random>.tmp`` beside the target, a
hidden file of decrypted records.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from statekeeper.store import SyncStateStore

from ._proc import cli_env, run_in_process


def test_sigterm_mid_export_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import statekeeper.cli.transfer as transfer

    db = tmp_path / "a.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"secret": "s3cr3t"})
    real = transfer.export_agents

    async def terminated_part_way(store: Any, ids: Any, out: IO[bytes], *rest: Any) -> Any:
        out.write(b'{"format": "statekeeper-export", "version": 2}\n')
        out.flush()
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode
        return await real(store, ids, out, *rest)

    seen: list[int] = []
    # (in case the command does not handle it: pytest must not die of the signal)
    monkeypatch.setattr(transfer, "export_agents", terminated_part_way)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        code, _out, err = run_in_process(
            ["export", "--db", str(db), "-o", str(tmp_path / "agents.jsonl")], {}, cwd=tmp_path
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 128 + signal.SIGTERM, err
    assert sorted(p.name for p in tmp_path.iterdir() if "agents" in p.name) == []
    assert signal.getsignal(signal.SIGTERM) is previous  # the command's handler is gone


#: ``statekeeper`` with SIGTERM sent at the worst moment, once the first line is out:
#: inside the event loop, just before it runs the callback that resumes a task whose
#: future is done (a signal handler runs between any two bytecodes of the main
#: thread; on a loaded machine it lands there now and then)
SIGTERM_IN_THE_LOOP = """
import os, signal, sys
from asyncio import events

printed = []
write = sys.stdout.write

def noted(text):
    printed.append(text)
    return write(text)

sys.stdout.write = noted
run = events.Handle._run
sent = []

def handle_run(self):
    if printed and not sent and "task_wakeup" in repr(self._callback):
        sent.append(True)
        os.kill(os.getpid(), signal.SIGTERM)
    return run(self)

events.Handle._run = handle_run
from statekeeper.cli.app import main
main(sys.argv[1:])
"""


def test_sigterm_inside_the_event_loop_ends_tail_follow(url: str) -> None:
    args = ["tail", "-f", "-n", "1", "beta", "--db", url, "--interval", "0.01"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_IN_THE_LOOP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        # a bound on a hung process, not a timing: it ends on its own
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "#2  patch" in stdout
    assert "Traceback" not in stderr
