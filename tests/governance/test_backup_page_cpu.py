"""What a whole SQLite store's page backup spends its CPU on (docs/benchmarks.md,
"backupmb"): the heads table is scanned once (its heads and the events they account
for in one statement; the totals count the events and snapshots only), and the
chunks are 2 MiB by default (the pipeline's buffers are faulted in once each: at 8 MiB
a 100,000-agent backup took ~16,000 more page faults). The backup restores as before
(a stream compacted by retention, found by the totals: tests/governance/
test_backup_compacted.py)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.governance.backup import BackupKey, backup, filecopy, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import keyring

MIB = 1 << 20


async def _filled(path: Path, agents: int, pad: int) -> None:
    async with StateStore(f"sqlite:///{path}", keyring=keyring()) as store:
        for i in range(agents):
            for j in range(2):
                state = {"i": i, "j": j, "pad": os.urandom(pad).hex()}  # not compressible
                await store.save(f"t{i % 3}/a{i:04d}", state)


async def test_the_heads_table_is_scanned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest's heads and totals read ``sk_agents`` in one statement (before: the
    totals summed the head seqs in a scan of their own, then the tags scanned it
    again); the totals and heads are what they were, and the backup restores."""
    await _filled(tmp_path / "s.db", 40, 50)
    statements: list[str] = []
    heads_of = filecopy._heads_of

    def traced(conn: sqlite3.Connection, tags: bool, *scan: Any) -> Any:
        conn.set_trace_callback(statements.append)
        try:
            return heads_of(conn, tags, *scan)
        finally:
            conn.set_trace_callback(None)

    monkeypatch.setattr(filecopy, "_heads_of", traced)
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        made = await backup(src, tmp_path / "b.skb", key)
    assert (made.agents, made.events, made.snapshots) == (40, 80, 0)
    # (with the C heads scan, none: the table is read from the snapshot's pages)
    scans = 0 if sqlite_pagepass.heads_scan is not None else 1
    assert sum("FROM sk_agents" in s for s in statements) == scans, statements
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        assert (await dst.load("t1/a0007")).data["j"] == 1
        assert len(await dst.list_agents(limit=100)) == 40


async def test_a_page_backup_is_cut_into_2_mib_chunks_by_default(tmp_path: Path) -> None:
    """Without ``chunk_bytes`` a whole store's image is sealed in chunks of 2 MiB (the
    last one shorter), not 8 MiB: a store of 2 to 8 MiB of pages is more than one
    chunk, and it restores."""
    await _filled(tmp_path / "s.db", 300, 4000)
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        made = await backup(src, tmp_path / "b.skb", key)
    reader = FrameReader(tmp_path / "b.skb", key)
    try:
        size = reader.manifest["file_bytes"]
        chunks = reader.manifest["chunks"]
    finally:
        reader.close()
    assert 2 * MIB < size < 8 * MIB
    assert len(chunks) == -(-size // (2 * MIB))
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        assert (await dst.load("t2/a0299")).data["i"] == 299
    assert made.agents == 300
