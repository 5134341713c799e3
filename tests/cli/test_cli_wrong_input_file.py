"""A data-movement trial gave ``import`` and ``restore`` files of the wrong kind:
``import DIR`` and ``import /dev/null`` said "no such file", an empty file "empty
file" after its name, and ``import some.db`` (a store) "line 1: not a JSON object: str
is not valid UTF-8" after reading its first "line" of binary. Each now names what the
file is (a folder, not a regular file, empty, a SQLite database, a backup given to
``import``, an export given to ``restore``), exit 2, from the file's first bytes only,
before the target store is opened: nothing is written to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.errors import ConfigurationError
from statekeeper.store import SyncStateStore

from ._proc import run_in_process


@pytest.fixture
def target(tmp_path: Path) -> Path:
    db = tmp_path / "target.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("kept", {"i": 1})
    return db


def _agents(db: Path) -> list[str]:
    with SyncStateStore(f"sqlite:///{db}") as store:
        return [a.agent_id for a in store.list_agents()]


def _refused(args: list[str], db: Path) -> str:
    """``args`` run: exit 2, one error line, the target's bytes and agents untouched."""
    before = db.read_bytes()
    code, out, err = run_in_process([*args, "--db", f"sqlite:///{db}"], {})
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert db.read_bytes() == before
    assert _agents(db) == ["kept"]
    return err


def _backup(tmp_path: Path, db: Path) -> tuple[Path, list[str]]:
    key = ["--backup-key", str(tmp_path / "bk.txt")]
    skb = tmp_path / "b.skb"
    code, _, err = run_in_process(
        ["backup", f"sqlite:///{db}", "--to", str(skb), *key, "--create-backup-key"], {}
    )
    assert code == 0, err
    return skb, key


def test_import_of_a_folder_says_it_is_a_folder(tmp_path: Path, target: Path) -> None:
    err = _refused(["import", str(tmp_path)], target)
    assert f"{tmp_path}: it is a folder, not a statekeeper export file" in err  # was: no such file


def test_import_of_a_device_says_it_is_not_a_regular_file(target: Path) -> None:
    err = _refused(["import", "/dev/null"], target)
    assert "/dev/null: not a regular file" in err and "`-` reads stdin" in err


def test_import_of_an_empty_file_says_it_is_empty(tmp_path: Path, target: Path) -> None:
    empty = tmp_path / "agents.jsonl"
    empty.touch()
    err = _refused(["import", str(empty)], target)
    assert f"{empty}: empty, not a statekeeper export" in err


def test_import_of_a_store_says_it_is_a_sqlite_database(tmp_path: Path, target: Path) -> None:
    other = tmp_path / "other.db"
    with SyncStateStore(f"sqlite:///{other}") as store:
        store.save("a", {"i": 1})
    for given in (other, target):  # another store, or the target itself
        err = _refused(["import", str(given)], target)
        assert f"{given}: it is a SQLite database" in err, err
        assert "not a statekeeper export file" in err and "UTF-8" not in err
        assert "statekeeper backup" in err and "statekeeper restore" in err


def test_import_of_a_store_on_stdin_says_it_is_a_sqlite_database(target: Path) -> None:
    before = target.read_bytes()
    code, out, err = run_in_process(
        ["import", "-", "--db", f"sqlite:///{target}"],
        {},
        # a store's bytes as text (the runner takes text: its ASCII magic reads the same)
        input=before.decode("latin-1"),
    )
    assert code == 2, (code, out, err)
    assert "stdin: it is a SQLite database" in err and "UTF-8" not in err
    assert target.read_bytes() == before and _agents(target) == ["kept"]


def test_import_of_a_backup_says_restore_it(tmp_path: Path, target: Path) -> None:
    skb, _ = _backup(tmp_path, target)
    err = _refused(["import", str(skb)], target)
    assert "it is a statekeeper backup, not an export file" in err and "restore" in err


def test_restore_of_what_is_not_a_backup_names_what_it_is(tmp_path: Path, target: Path) -> None:
    _, key = _backup(tmp_path, target)
    export = tmp_path / "agents.jsonl"
    code, _, err = run_in_process(["export", "-o", str(export), "--db", f"sqlite:///{target}"], {})
    assert code == 0, err
    empty = tmp_path / "empty.skb"
    empty.touch()
    for given, said in [
        (target, "it is a SQLite database (a statekeeper store?), not a statekeeper backup"),
        (export, "it is a statekeeper export file, not a backup: import it with"),
        (tmp_path, "it is a folder, not a statekeeper backup"),  # was: [Errno 21] ...
        (Path("/dev/null"), "not a regular file (a device, pipe or socket)"),
        (empty, "empty, not a statekeeper backup"),
    ]:
        err = _refused(["restore", str(given), *key], target)
        assert f"{given}: {said}" in err, err


def test_export_to_a_folder_is_refused_and_writes_nothing(tmp_path: Path, target: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    around = sorted(tmp_path.iterdir())
    err = _refused(["export", "-o", str(folder)], target)
    assert f"cannot write statekeeper export file {folder}: it is a folder" in err
    assert list(folder.iterdir()) == [] and sorted(tmp_path.iterdir()) == around


def test_the_refusal_is_a_typed_configuration_error(tmp_path: Path) -> None:
    from statekeeper.cli.file_kinds import check_input_file
    from statekeeper.errors import WrongFileKind

    with pytest.raises(WrongFileKind) as caught:
        check_input_file(tmp_path, "export")
    assert isinstance(caught.value, ConfigurationError)
    assert caught.value.path == str(tmp_path) and "folder" in caught.value.reason
