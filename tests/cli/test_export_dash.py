"""``statekeeper export -o -`` writes to standard output, as ``import -`` reads standard
input. (Before: it wrote a file named ``-`` in the current folder and said "exported
N agent(s) ... to -", so ``export -o - | gzip > backup.gz`` kept an empty backup.)"""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper.store import SyncStateStore

from ._export_digest import digest_of
from ._proc import run_in_process


def test_export_to_dash_writes_stdout_and_no_file(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"i": 1})
        store.save("b", {"i": 2})
    code, out, err = run_in_process(["export", "-o", "-", "--db", str(db)], {}, cwd=tmp_path)
    assert code == 0, err
    assert not (tmp_path / "-").exists()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1] == {"complete": {"agents": 2, "events": 2, "sha256": digest_of(out)}}
