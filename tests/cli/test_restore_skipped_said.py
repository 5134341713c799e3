"""``statekeeper restore --skip-existing`` says how many agents it left out.

Before, the text output said only "restored and verified N agent(s)": agents the
target already held kept the target's own version (perhaps older than the backup's)
and nothing told the user (only ``--json`` had ``skipped_existing``), while
``import --skip-existing`` names what it skipped."""

from __future__ import annotations

from pathlib import Path

from statekeeper.store import SyncStateStore

from ._proc import run_in_process


def test_restore_skip_existing_says_what_it_skipped(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.db", tmp_path / "dst.db"
    with SyncStateStore(f"sqlite:///{src}") as store:
        for n in range(3):
            store.save(f"acme/a{n}", {"n": n})
    key = ["--backup-key", str(tmp_path / "bk.txt")]
    b = tmp_path / "b.skb"
    code, _, err = run_in_process(
        ["backup", f"sqlite:///{src}", "--to", str(b), *key, "--create-backup-key"], {}
    )
    assert code == 0, err
    with SyncStateStore(f"sqlite:///{dst}") as store:
        store.save("acme/a1", {"n": "the target's own"})
    code, out, err = run_in_process(
        ["restore", str(b), "--to", f"sqlite:///{dst}", *key, "--skip-existing"], {}
    )
    assert code == 0, err
    text = " ".join(out.split())
    assert "restored and verified 2 agent(s)" in text
    assert "skipped 1 existing agent(s)" in text, text
    with SyncStateStore(f"sqlite:///{dst}") as store:
        assert store.load("acme/a1").data == {"n": "the target's own"}
