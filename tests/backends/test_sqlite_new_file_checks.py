"""A new SQLite store's first write checks its file without reading it (issue 11,
docs/benchmarks.md "perf-normal").

Before its first write a store without a key looks whether the store is encrypted (the
"encrypted" marker, then its newest heads: store/keyguard.py), and checks its witness
file. On a file the store's own open created, both reads were statements prepared and
run on the first save (~0.12 ms of it), and the absent witness file was looked up twice.
Now the open notes that the file it created holds no marker and no agent, with the
writer connection's data version: while nothing was committed since (by this backend's
writer, or by any other connection), the marker and the newest agents are known without
a statement. These tests pin what a user relies on — a store encrypted by another
process (or by this one) after the open still refuses a write in the clear — and that
the first save of a new store runs no read statement.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import sqlite as sk_sqlite
from statekeeper.errors import KeyRequired
from statekeeper.security import Keyring, generate_key
from statekeeper.security.highwater import HighWater
from statekeeper.store.keyguard import ENCRYPTED

KEY = generate_key()


def _url(path: Path) -> str:
    return f"sqlite:///{path}?synchronous=NORMAL"


def _statements(store: StateStore) -> list[str]:
    seen: list[str] = []
    writer = store.backend._writer  # type: ignore[attr-defined]
    writer.set_trace_callback(seen.append)
    return seen


async def test_a_new_stores_first_save_reads_nothing_before_its_write(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path / "s.db"), durability="sync") as store:
        seen = _statements(store)
        await store.save("a", {"n": 1})
        first_write = next(i for i, s in enumerate(seen) if s.startswith("BEGIN"))
        before = seen[:first_write]
        assert before and all(s == "PRAGMA data_version" for s in before), before
        assert (await store.load("a")).data == {"n": 1}


async def test_encrypted_by_another_store_after_the_open_still_refuses(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as keyless:  # creates the file
        async with StateStore(_url(path), keyring=Keyring({"k1": KEY}), witness=False) as keyed:
            await keyed.save("secret", {"card": "4111"})  # marks the store, encrypted
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})
        assert await keyless.head("leak") == 0


async def test_a_marker_set_by_another_connection_after_the_open_refuses(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as keyless:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("INSERT INTO sk_meta (key, value) VALUES ('marker:encrypted', '1')")
        finally:
            conn.close()
        assert await keyless.backend.read_marker(ENCRYPTED) is True
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})


async def test_a_marker_set_through_the_same_backend_refuses(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path / "s.db"), durability="sync") as keyless:
        await keyless.backend.set_marker(ENCRYPTED)  # this backend's own writer commits
        assert await keyless.backend.read_marker(ENCRYPTED) is True
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})


async def test_a_file_another_process_created_and_encrypted_first_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes creating the same file: the other one's link won and it wrote
    (encrypted) before this open. This open still took the file for one it created
    (``opened_new``); what it found in it decides, not the race it lost."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), keyring=Keyring({"k1": KEY}), witness=False) as keyed:
        await keyed.save("secret", {"card": "4111"})
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p != str(path) and real_exists(p))
    monkeypatch.setattr(sk_sqlite.SQLiteBackend, "_create_file", lambda self: None)
    async with StateStore(_url(path), durability="sync", witness=False) as keyless:
        assert keyless.backend.opened_new
        monkeypatch.undo()
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})


async def test_a_new_stores_absent_witness_file_is_looked_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_read = HighWater._read

    def read(self: HighWater) -> dict[str, dict[str, object]]:
        opened.append(self.path)
        return real_read(self)

    monkeypatch.setattr(HighWater, "_read", read)
    async with StateStore(_url(tmp_path / "s.db"), durability="sync") as store:
        await store.save("a", {"n": 1})
        await store.save("b", {"n": 1})
    assert opened == [] or all(p.endswith(".sk-witness") for p in opened)
    # the close's flush reads it (merging with other processes' marks): not the check
    assert len(opened) <= 1
    assert (tmp_path / "s.db.sk-witness").exists()
