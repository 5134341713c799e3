"""Decrypted copies of an encrypted store are private: ``export -o FILE`` of an
encrypted store writes FILE readable by its owner only (0600, as key files are), its
header says the source was encrypted, and ``import`` of such a file into a store that
is not encrypted warns (one line on stderr)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from statekeeper import SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from tests.keyfiles import write_key_file

from ._subprocess import cli_in_process, one_error_line


def _keys(path: Path) -> Path:
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}})
    path.chmod(0o600)
    return path


def _encrypted(tmp_path: Path) -> tuple[str, Path]:
    keys = _keys(tmp_path / "keys.json")
    url = f"sqlite:///{tmp_path / 'enc.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(keys)) as store:
        store.save("a1", {"secret": "s3cr3t"})
    return url, keys


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_an_export_of_an_encrypted_store_is_owner_only(tmp_path: Path) -> None:
    url, keys = _encrypted(tmp_path)
    out = tmp_path / "x.jsonl"
    done = cli_in_process("export", "--db", url, "--key-file", str(keys), "-o", str(out))
    assert done.code == 0, str(done)
    assert b"s3cr3t" in out.read_bytes()  # decrypted...
    assert _private(out), oct(out.stat().st_mode)  # ...so readable by its owner only
    header = json.loads(out.read_bytes().splitlines()[0])
    assert header["encrypted"] is True and header["version"] == 3


def test_an_export_of_a_plain_store_says_nothing_of_encryption(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with SyncStateStore(url) as store:
        store.save("a1", {"n": 1})
    out = tmp_path / "x.jsonl"
    assert cli_in_process("export", "--db", url, "-o", str(out)).code == 0
    assert "encrypted" not in json.loads(out.read_bytes().splitlines()[0])


def test_importing_an_encrypted_stores_export_into_a_plain_store_warns(tmp_path: Path) -> None:
    url, keys = _encrypted(tmp_path)
    out = tmp_path / "x.jsonl"
    assert cli_in_process("export", "--db", url, "--key-file", str(keys), "-o", str(out)).code == 0
    plain = f"sqlite:///{tmp_path / 'plain.db'}"
    assert cli_in_process("init", plain).code == 0
    done = cli_in_process("import", str(out), "--db", plain)
    assert done.code == 0, str(done)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), str(done)
    assert "encrypted" in lines[0] and "not encrypted" in lines[0], lines[0]
    # into an encrypted store: no warning
    other = f"sqlite:///{tmp_path / 'enc2.db'}"
    with SyncStateStore(other, keyring=Keyring.from_file(keys)) as store:
        store.save("z", {"n": 1})
    again = cli_in_process("import", str(out), "--db", other, "--key-file", str(keys))
    assert again.code == 0 and again.stderr == "", str(again)
    # a file whose header does not say so (written before the flag): no warning
    lines_of = out.read_bytes().splitlines()
    header = json.loads(lines_of[0])
    del header["encrypted"]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"\n".join([json.dumps(header).encode(), *lines_of[1:]]) + b"\n")
    plain2 = f"sqlite:///{tmp_path / 'plain2.db'}"
    assert cli_in_process("init", plain2).code == 0
    quiet = cli_in_process("import", str(old), "--db", plain2)
    assert quiet.code == 0 and quiet.stderr == "", str(quiet)


def test_an_output_that_is_not_a_regular_file_is_refused_as_such(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with SyncStateStore(url) as store:
        store.save("a1", {"n": 1})
    run = cli_in_process("export", "--db", url, "-o", "/dev/null")
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert "/dev/null" in line and "not a regular file" in line, line
    assert "statekeeper wrote" not in line, line
