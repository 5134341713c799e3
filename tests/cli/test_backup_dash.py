"""``statekeeper backup URL --to -`` wrote a file named ``-`` in the current folder and
said so, where ``export -o -`` writes to standard output: ``backup --to - | ssh ...``
kept nothing. A backup is written to a file and moved into place (an incremental one
names its parent by path), so standard output is refused with a typed error naming
--to, before anything is written; a file named ``-`` is still ``./-``."""

from __future__ import annotations

from pathlib import Path

from statekeeper.store import SyncStateStore

from ._proc import run_in_process


def test_backup_to_dash_is_refused_and_writes_no_file(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"i": 1})
    key = tmp_path / "backup.key"
    base = ["backup", f"sqlite:///{db}", "--backup-key", str(key), "--create-backup-key"]
    code, out, err = run_in_process([*base, "--to", "-"], {}, cwd=tmp_path)
    assert code == 2, (code, out, err)
    assert "--to" in err and "standard output" in err and "./-" in err
    assert not (tmp_path / "-").exists()
    code, out, err = run_in_process([*base, "--to", "./-"], {}, cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "-").is_file()
