"""A ``langgraph export`` into a new SQLite file that fails after the file was opened
leaves no file behind (before: a partial, or complete but unverified, SQLite database
at the target that looked like a good export). The export is built in a temporary
sibling and put at the target only once copied and verified; a database that was
already there is written in place, as before (a resumed export)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from .test_langgraph_migrate import _init, _populate, _run

pytest.importorskip("langgraph.checkpoint.sqlite")


@pytest.fixture
def store(tmp_path: Path) -> str:
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=3)
    url = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    assert _run("langgraph", "import", source, url).returncode == 0
    return url


def _breaks(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    from statekeeper.integrations.langgraph import migrate_sides

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(migrate_sides._PeerSide, where, broken)


@pytest.mark.parametrize("where", ["put_writes_at", "settled"])
def test_a_failed_export_to_a_new_file_leaves_no_file(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    out = tmp_path / "out" / "export.sqlite"
    out.parent.mkdir()
    _breaks(monkeypatch, where)
    done = _run("langgraph", "export", store, str(out))
    assert done.returncode != 0, done.stdout
    assert "No space left" in done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == []  # no file, no temporary
    monkeypatch.undo()
    again = _run("langgraph", "export", store, str(out), "--json")
    assert again.returncode == 0, again.stderr
    assert '"threads_verified": 3' in again.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["export.sqlite"]


def test_an_existing_database_is_written_in_place(store: str, tmp_path: Path) -> None:
    out = tmp_path / "existing.sqlite"
    assert _run("langgraph", "export", store, str(out)).returncode == 0
    with sqlite3.connect(out) as conn:  # (a copy of this source, one checkpoint short)
        conn.execute("DELETE FROM checkpoints WHERE rowid = (SELECT MAX(rowid) FROM checkpoints)")
    inode = out.stat().st_ino
    done = _run("langgraph", "export", store, str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert '"checkpoints_copied": 1' in done.stdout
    assert out.stat().st_ino == inode  # the same file, resumed in place


def test_the_staged_file_never_replaces_one_made_meanwhile(tmp_path: Path) -> None:
    from statekeeper._files import staged_new_file

    target = tmp_path / "export.sqlite"
    with pytest.raises(FileExistsError), staged_new_file(target) as staged:
        staged.write_text("ours")
        target.write_text("theirs")  # another process took the name meanwhile
    assert target.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.sqlite"]
