"""``statekeeper backup --to b1.skb`` over an existing backup replaced it and said
so, even when b1.skb was the parent of incrementals (the chain then failed to restore:
"backup b2.skb does not follow b1.skb"). An existing target is refused (exit 2, one
line naming it and --overwrite) before the store is opened; ``--overwrite`` replaces
it on purpose."""

from __future__ import annotations

from pathlib import Path

from statekeeper.store import SyncStateStore

from ._proc import run_in_process


def test_backup_over_an_existing_backup_needs_overwrite(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("acme/x", {"i": 1})
    key = ["--backup-key", str(tmp_path / "bk.txt")]
    b1, b2 = tmp_path / "b1.skb", tmp_path / "b2.skb"
    code, _, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(b1), *key, "--create-backup-key"], {}
    )
    assert code == 0, err
    code, _, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(b2), "--incremental", str(b1), *key], {}
    )
    assert code == 0, err
    before = b1.read_bytes()
    code, out, err = run_in_process(["backup", f"sqlite:///{db}", "--to", str(b1), *key], {})
    assert code == 2, (code, out, err)
    assert "already exists" in err and str(b1) in err and "--overwrite" in err
    assert len(err.strip().splitlines()) == 1
    assert b1.read_bytes() == before  # (was: replaced, rc 0)
    code, _, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(b1), *key, "--overwrite", "--json"], {}
    )
    assert code == 0, err
    assert b1.read_bytes() != before
