"""Creating a store file where the file system has no hard links (FAT, exFAT, some
network and FUSE file systems): another process that creates the same file at the
same moment, and writes to it, never has its file replaced by ours."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import SyncStateStore, _files

from ..cli._proc import cli_env

#: the other process: links refused as on such a file system, one event saved
RIVAL = """
import os, sys
def no_link(*args, **kwargs):
    raise PermissionError(1, "Operation not permitted")
os.link = no_link
from statekeeper import SyncStateStore
with SyncStateStore(sys.argv[1], witness=False) as store:
    store.save("rival", {"by": "the other process"})
"""


def _no_link(*args: Any, **kwargs: Any) -> None:
    raise PermissionError(errno.EPERM, "Operation not permitted")


def _rival_first(url: str, path: Path, move: Callable[..., Any]) -> Callable[..., Any]:
    """``move`` (what puts a new file in place), run after the other process has
    created the store at ``path`` and saved an event in it: the moment between this
    process's deciding to create the file and its file landing there."""
    done = [False]

    def moved(src: Any, dst: Any, *args: Any) -> Any:
        if not done[0] and os.fspath(dst) == str(path):
            done[0] = True
            rival = subprocess.run(
                [sys.executable, "-c", RIVAL, url],
                capture_output=True,
                text=True,
                env=cli_env(),
                timeout=300,  # a bound on a hung process, not a timing
            )
            assert rival.returncode == 0, rival.stderr
        return move(src, dst, *args)

    return moved


def test_a_store_created_meanwhile_by_another_process_is_opened_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    monkeypatch.setattr(os, "link", _no_link)
    # what puts the file in place: a replace after a check (before), or the
    # rename that refuses to replace (``_files._rename_no_replace``)
    monkeypatch.setattr(os, "replace", _rival_first(url, path, os.replace))
    rename = getattr(_files, "_rename_no_replace", os.replace)
    monkeypatch.setattr(_files, "_rename_no_replace", _rival_first(url, path, rename), False)
    with SyncStateStore(url, witness=False) as store:
        store.save("ours", {"by": "this process"})
    monkeypatch.undo()
    with SyncStateStore(url, witness=False) as store:
        assert store.load("rival").data == {"by": "the other process"}
        assert store.load("ours").data == {"by": "this process"}
        assert store.verify().ok
    assert sorted(p.name for p in tmp_path.iterdir() if ".sk-new-" in p.name) == []


def test_without_hard_links_nor_a_no_replace_rename_a_file_is_created_exclusively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", _no_link)
    monkeypatch.setattr(_files, "_rename_no_replace", lambda src, dst: None)
    src, dst = tmp_path / "new", tmp_path / "placed"
    src.write_bytes(b"ours")
    dst.write_bytes(b"theirs")
    assert _files.place_unless_exists(str(src), str(dst)) is False
    assert dst.read_bytes() == b"theirs"
    dst.unlink()
    assert _files.place_unless_exists(str(src), str(dst)) is True
    assert dst.read_bytes() == b"ours"


def test_the_no_replace_rename_refuses_an_existing_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "new", tmp_path / "placed"
    src.write_bytes(b"ours")
    dst.write_bytes(b"theirs")
    refused = _files._rename_no_replace(str(src), str(dst))
    if refused is None:
        pytest.skip("no rename-without-replacing on this system or file system")
    assert refused is False and dst.read_bytes() == b"theirs"
    dst.unlink()
    assert _files._rename_no_replace(str(src), str(dst)) is True
    assert dst.read_bytes() == b"ours" and not src.exists()
