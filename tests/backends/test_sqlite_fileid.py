"""The identity of the file at a path (``sqlite_fileid.file_id``): the C one
(``native/fileid.c``, where built) answers as the reference ``python_file_id``
(``os.stat``'s device and inode) does — a file, a directory, a symlink followed,
nothing there, a path through a file, a symlink loop, a bad path — and it is what the
SQLite engine checks its store file and WAL with before each commit."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import connections, opening
from statekeeper.backends.sqlite import fileid as sqlite_fileid
from statekeeper.backends.sqlite.fileid import python_file_id


def _answer(fn: Callable[[Any], Any], path: Any) -> Any:
    try:
        return ("ok", fn(path))
    except OSError as exc:
        return ("oserror", type(exc), exc.errno, exc.filename)
    except (ValueError, TypeError) as exc:
        return ("error", type(exc))


def _native() -> Callable[[Any], Any]:
    if not sqlite_fileid.NATIVE:
        pytest.skip("the C file identity is not built here (or STATEKEEPER_PURE is set)")
    return sqlite_fileid.file_id


def _paths(tmp_path: Path) -> list[Any]:
    f = tmp_path / "store.db"
    f.write_bytes(b"x")
    (tmp_path / "link").symlink_to(f)
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return [
        str(f),
        str(tmp_path),
        str(tmp_path / "link"),
        str(tmp_path / "missing"),
        str(f / "inside-a-file"),
        str(tmp_path / "loop-a"),
        str(tmp_path / "nul\0byte"),
        os.fsencode(str(f)),
        f,
        "",
    ]


def test_the_c_file_id_answers_as_os_stat(tmp_path: Path) -> None:
    native = _native()
    for path in _paths(tmp_path):
        assert _answer(native, path) == _answer(python_file_id, path), path


def test_a_file_id_is_the_files_device_and_inode(tmp_path: Path) -> None:
    native = _native()
    f = tmp_path / "store.db"
    f.write_bytes(b"x")
    st = os.stat(f)
    assert native(str(f)) == (st.st_dev, st.st_ino)
    assert native(str(tmp_path / "missing")) is None
    replaced = tmp_path / "other.db"
    replaced.write_bytes(b"y")
    os.replace(replaced, f)  # another file moved over it: another identity
    assert native(str(f)) != (st.st_dev, st.st_ino)


def test_the_sqlite_engine_checks_files_with_it() -> None:
    for part in (opening, connections):  # (the file opened; the file still there)
        assert vars(part)["_file_id"] is sqlite_fileid.file_id
