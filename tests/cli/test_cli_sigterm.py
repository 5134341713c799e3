"""SIGTERM (``timeout``, ``kill``, a service manager stopping a job) ends a command as
Ctrl-C does: by an exception, so its ``finally`` blocks run. (Before: the process
vanished mid-export and left ``.agents.jsonl.<random>.tmp`` beside the target, a
hidden file of decrypted records.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import IO, Any

import pytest

from statekeeper.store import SyncStateStore

from ._proc import run_in_process


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
