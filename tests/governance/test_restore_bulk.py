"""A full file backup restored into an empty SQLite store is written by SQLite alone
(``INSERT ... SELECT`` from the checked image: no record appended one at a time), and
writes exactly the rows the record path writes — events, the latest snapshot, a
compacted stream's base snapshot, idempotency keys, head rows and tags — while a target
that already holds a stream still takes the record path. A full page backup and its
page incrementals (rebuilt into one checked image) are written so too."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from .test_backup_compacted import fill, keyring

TABLES = {
    "sk_agents": "agent_id, head_seq, created_at, updated_at, head_tag",
    "sk_events": "agent_id, seq, kind, ts, payload, checksum",
    "sk_snapshots": "agent_id, seq, ts, payload, checksum",
    "sk_idempotency": "agent_id, key, first_seq, last_seq",
}


def rows(db: Path) -> dict[str, list[Any]]:
    conn = sqlite3.connect(db)
    try:
        return {
            table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall()
            for table, columns in TABLES.items()
        }
    finally:
        conn.close()


async def source(db: Path, file: Path, bkey: BackupKey, incremental: Path | None = None) -> None:
    """Streams with snapshots (several each), idempotency keys and three compacted by
    retention; its full backup (and an incremental after more writes)."""
    async with StateStore(f"sqlite:///{db}", keyring=keyring(), snapshot_every=3) as src:
        await fill(src, 6, 8)
        await apply_retention(src, RetentionPolicy.parse("t0 keep_last=3\n"))
        await backup(src, file, bkey)
        if incremental is not None:
            await fill(src, 6, 2, start=8)
            await backup(src, incremental, bkey, since=file)


def no_appends(store: StateStore) -> list[str]:
    """Every record write of ``store``'s engine counted (and refused)."""
    calls: list[str] = []
    backend = store.backend
    for name in ("append", "append_batch", "append_from_base", "save_snapshot"):

        async def refused(*args: Any, name: str = name) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called")

        setattr(backend, name, refused)
    return calls


async def record_path(db: Path, files: list[Path], bkey: BackupKey) -> None:
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as dst:

        async def no_bulk_copy(
            image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
        ) -> bool:
            return False

        dst.backend.import_image = no_bulk_copy  # type: ignore[method-assign]
        await restore(dst, files, bkey)


@pytest.mark.parametrize("chain", ["full", "full and incremental"])
async def test_a_file_backup_fills_an_empty_sqlite_store_without_a_record_appended(
    tmp_path: Path, chain: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / "full.skb"]
    if chain != "full":
        files.append(tmp_path / "inc.skb")
    await source(tmp_path / "s.db", files[0], bkey, files[1] if chain != "full" else None)
    async with StateStore(f"sqlite:///{tmp_path / 'bulk.db'}", keyring=keyring()) as dst:
        calls = no_appends(dst)
        result = await restore(dst, files, bkey)
        assert calls == []
        # t0: its last 3 events each (then 2 more), t1: 8 (then 10)
        assert (result.agents, result.events) == (6, 33 if chain == "full" else 45)
        assert result.snapshots == 6
    await record_path(tmp_path / "records.db", files, bkey)
    bulk, records = rows(tmp_path / "bulk.db"), rows(tmp_path / "records.db")
    assert bulk == records  # the same rows, column for column
    assert len(bulk["sk_snapshots"]) > 6  # the latest of each, and the bases
    assert bulk["sk_idempotency"] and all(tag is not None for *_, tag in bulk["sk_agents"])
    async with StateStore(f"sqlite:///{tmp_path / 'bulk.db'}", keyring=keyring()) as dst:
        assert (await dst.verify()).ok
        # a key seen before the backup still deduplicates; the stream takes writes
        before = (await dst.load("t1/a01")).seq
        await dst.save("t1/a01", {"again": 1}, idempotency_key="k5")
        assert (await dst.load("t1/a01")).seq == before
        await dst.save("t0/a00", {"after": "restore"})
        assert (await dst.verify()).ok


async def test_a_target_holding_a_stream_takes_the_record_path(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    await source(tmp_path / "s.db", file, bkey)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await dst.save("other/x", {"kept": True})
        appended: list[int] = []
        append_batch = dst.backend.append_batch

        async def counted(requests: Any) -> Any:
            appended.append(len(requests))
            return await append_batch(requests)

        dst.backend.append_batch = counted  # type: ignore[method-assign]
        result = await restore(dst, [file], bkey)
        assert (result.agents, result.events) == (6, 33)
        assert appended
        assert (await dst.verify()).ok
        assert (await dst.load("other/x")).data == {"kept": True}


async def test_an_image_other_than_the_checked_one_writes_nothing(tmp_path: Path) -> None:
    """The engine writes the image only if it holds what the checking pass counted
    (agents, events, snapshots): otherwise BackupCorrupt, and the target stays empty."""
    image = tmp_path / "image.db"
    async with StateStore(f"sqlite:///{image}", keyring=keyring()) as src:
        await fill(src, 4, 3)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        for counts in [(5, 12, 0), (4, 11, 0), (4, 12, 1)]:
            with pytest.raises(BackupCorrupt, match="not what the restore checked"):
                await dst.backend.import_image(str(image), counts)
            assert await dst.list_agents() == []
        assert await dst.backend.import_image(str(image), (4, 12, 0))
        assert len(await dst.list_agents()) == 4
        assert (await dst.verify()).ok
