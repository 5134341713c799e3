"""``statekeeper backup --incremental PARENT --backup-key NEW --create-backup-key`` with
``NEW`` missing wrote a fresh random key to ``NEW``, then failed ("written with another
backup key", exit 2) and left the useless key file behind, where a user may take it for
the chain's key. An incremental backup is sealed with its parent's key, which a new key
can never be: the pair is refused first, naming both options, and nothing is written."""

from __future__ import annotations

from pathlib import Path

from statekeeper.store import SyncStateStore

from ._proc import run_in_process


def test_a_new_backup_key_for_an_incremental_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"i": 1})
    key = tmp_path / "backup.key"
    full = tmp_path / "full.skb"
    code, out, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(full), "--backup-key", str(key),
         "--create-backup-key"], {}, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    new_key = tmp_path / "new.key"
    code, out, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(tmp_path / "inc.skb"), "--incremental",
         str(full), "--backup-key", str(new_key), "--create-backup-key"], {}, cwd=tmp_path,
    )  # fmt: skip
    assert code == 2, (code, out, err)
    assert "--create-backup-key" in err and "--incremental" in err, err
    assert not new_key.exists()
    assert not (tmp_path / "inc.skb").exists()
    # the chain's own key still takes the incremental
    code, out, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(tmp_path / "inc.skb"), "--incremental",
         str(full), "--backup-key", str(key), "--create-backup-key"], {}, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
