"""A path a command cannot write names that path and why.

``init`` (and any first write) at a path whose file or folder cannot be made: before,
"File exists: afile" for ``afile/x.db`` (afile a file), and for a folder no file can be
made in, SQLite's "unable to open database file" naming a temporary
``x.db.sk-new-<pid>-<hex>`` the user never asked for. ``audit verify --witness
nodir/head.json``: the log was read, then "No such file or directory:
nodir/.head.json.<hex>.tmp"; now refused first, as every other output file is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekeeper import SyncStateStore
from statekeeper.errors import BackendError
from statekeeper.governance import Audit, parse_policy
from statekeeper.security import Keyring, generate_key
from tests.keyfiles import write_key_file

from ._subprocess import cli


def test_a_file_where_the_folder_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("mine\n")
    result = cli("init", "afile/x.db", cwd=tmp_path)
    assert result.code == 2, result
    assert result.stderr.strip() == (
        "error: afile/x.db: cannot create the folder afile: a file is in the way"
    ), result
    assert (tmp_path / "afile").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_a_folder_no_file_can_be_made_in_is_named_not_a_temporary_file(tmp_path: Path) -> None:
    # /proc refuses new files to every user, root included (a read-only folder does not)
    result = cli("init", "/proc/sk-x.db", cwd=tmp_path)
    assert result.code == 2, result
    assert result.stderr.strip() == (
        "error: /proc/sk-x.db: cannot create the store file in /proc: No such file or directory"
    ), result
    with pytest.raises(BackendError, match=r"^/proc/sk-x\.db: cannot create the store file"):
        SyncStateStore("sqlite:////proc/sk-x.db").agent("a")


def test_audit_verify_refuses_a_witness_in_a_missing_folder_first(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    policy = parse_policy('[principals.ops]\nadmin = ["**"]\n')
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ring = Keyring.from_file(keys)
    with SyncStateStore(url, keyring=ring, principal="ops", policy=policy, audit=Audit()) as s:
        s.save("a", {"n": 1})
    args = ("audit", "verify", "--db", url, "--key-file", str(keys), "--witness")
    result = cli(*args, "nodir/head.json", cwd=tmp_path)
    assert result.code == 2, result
    assert result.stderr.strip() == (
        "error: cannot write audit head file nodir/head.json: no such folder: nodir"
    ), result
    kept = cli(*args, "head.json", cwd=tmp_path)
    assert kept.code == 0 and (tmp_path / "head.json").exists(), kept
