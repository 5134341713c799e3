"""An incremental backup of a SQLite store whose parent is a page backup ships the pages
that changed since (format version 4): only those pages' bytes, encrypted and signed as
a full backup's; a restore rebuilds the image from the chain (each link checked, the
result against the last manifest's page digests) and restores it into any engine;
a missing, edited or reordered link is refused with nothing restored."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import PAGE_SIZE
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.errors import BackupCorrupt, BackupError
from statekeeper.governance.backup import BackupKey, BackupResult, backup, filecopy, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ..backends._services import fresh_url
from ._point_in_time import keyring, write_before_heads, write_during
from .test_backup_file import reseal_manifest

PAGE = PAGE_SIZE  # the page size of the files these tests create


async def fill(store: StateStore, agents: int, events: int = 3) -> None:
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j == 1 else None
            await store.save(
                f"t{i % 3}/a{i:03d}", {"i": i, "j": j, "pad": "x" * 200}, idempotency_key=key
            )


def manifest(file: Path, key: BackupKey) -> tuple[int, dict[str, Any]]:
    reader = FrameReader(file, key)
    try:
        return reader.header.version, reader.manifest
    finally:
        reader.close()


async def page_incremental(
    src: StateStore, file: Path, key: BackupKey, since: Path, chunk_bytes: int = 8 << 20
) -> BackupResult:
    """An incremental backup of ``src``: it must be one by pages."""
    result = await backup(src, file, key, since=since, chunk_bytes=chunk_bytes)
    version, body = manifest(file, key)
    assert version == 6 and body["layout"] == "sqlite-page-delta"
    assert result.parent == manifest(since, key)[1]["backup_id"]
    return result


async def contents(store: StateStore) -> dict[str, tuple[int, Any]]:
    out: dict[str, tuple[int, Any]] = {}
    async for info in store.iter_agents():
        out[info.agent_id] = (info.head_seq, (await store.load(info.agent_id)).data)
    return out


async def test_an_incremental_ships_only_the_pages_that_changed(tmp_path: Path) -> None:
    """5 of 300 agents saved once more: the incremental ships the changed pages only
    (each listed, as many bytes as pages), a small fraction of the full image."""
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 300)
        whole = await backup(src, full, bkey)
        for i in range(0, 300, 60):
            await src.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": 9})
        result = await page_incremental(src, inc, bkey, full)
    _, body = manifest(inc, bkey)
    _, parent = manifest(full, bkey)
    changed = len(body["changed"]) // 4
    assert 0 < changed < parent["pages"] // 4
    assert result.record_bytes == changed * PAGE == body["file_bytes"]
    assert result.bytes_written < whole.bytes_written // 4
    # counted as the row path counts an incremental: the streams changed, their new events
    assert (result.agents, result.copied, result.events) == (300, 5, 5)
    assert len(body["page_digests"]) == body["pages"] * 16


async def test_a_chain_of_page_incrementals_restores_the_source(tmp_path: Path) -> None:
    """Saves, new agents, a delete, a snapshot, idempotency keys, between two
    incrementals: the chain restores every stream as the source holds it."""
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / f"{n}.skb" for n in ("full", "inc1", "inc2")]
    async with StateStore(
        f"sqlite:///{tmp_path / 's.db'}", keyring=keyring(), snapshot_every=4
    ) as src:
        await fill(src, 60)
        await backup(src, files[0], bkey)
        await src.save("t0/a000", {"again": 1})
        await src.save("new/agent", {"born": 1}, idempotency_key="first")
        await src.delete("t1/a001")
        await page_incremental(src, files[1], bkey, files[0])
        for i in range(40, 60):
            await src.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": 7, "pad": "y" * 3000})
        await src.save("t0/a000", {"again": 2})
        await page_incremental(src, files[2], bkey, files[1], chunk_bytes=PAGE)  # many chunks
        expected = await contents(src)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        restored = await restore(dst, files, bkey)
        assert restored.backup_ids == [manifest(f, bkey)[1]["backup_id"] for f in files]
        assert await contents(dst) == expected
        assert "t1/a001" not in expected and "new/agent" in expected
        assert (await dst.verify()).ok
        assert (await dst.save("new/agent", {"born": 1}, idempotency_key="first")).duplicate


async def test_a_page_chain_restores_into_postgresql(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 40)
        await backup(src, full, bkey)
        await src.save("t2/a002", {"later": True})
        await src.save("fresh/one", {"new": True})
        await page_incremental(src, inc, bkey, full)
        expected = await contents(src)
    with fresh_url("postgresql", tmp_path) as url:
        async with StateStore(url, keyring=keyring()) as dst:
            restored = await restore(dst, [full, inc], bkey)
            assert restored.agents == 41
            assert await contents(dst) == expected
            assert (await dst.verify()).ok


@pytest.fixture
async def chain(tmp_path: Path) -> tuple[BackupKey, list[Path]]:
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / f"{n}.skb" for n in ("full", "inc1", "inc2")]
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 30)
        await backup(src, files[0], bkey)
        await src.save("t0/a000", {"one": 1})
        await page_incremental(src, files[1], bkey, files[0])
        await src.save("t0/a003", {"two": 2})
        await page_incremental(src, files[2], bkey, files[1])
    return bkey, files


async def refused(
    tmp_path: Path, files: list[Path], bkey: BackupKey, error: type[Exception]
) -> str:
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        with pytest.raises(error) as caught:
            await restore(dst, files, bkey)
        assert [a async for a in dst.iter_agents()] == []  # nothing restored
    return str(caught.value)


async def test_a_missing_link_is_refused(
    tmp_path: Path, chain: tuple[BackupKey, list[Path]]
) -> None:
    bkey, files = chain
    message = await refused(tmp_path, [files[0], files[2]], bkey, BackupError)
    assert "does not follow" in message
    message = await refused(tmp_path, [files[1], files[2]], bkey, BackupError)
    assert "is incremental" in message


async def test_a_reordered_chain_is_refused(
    tmp_path: Path, chain: tuple[BackupKey, list[Path]]
) -> None:
    bkey, files = chain
    await refused(tmp_path, [files[0], files[2], files[1]], bkey, BackupError)


async def test_an_edited_link_is_refused(
    tmp_path: Path, chain: tuple[BackupKey, list[Path]]
) -> None:
    """A byte of an incremental's chunk flipped: its authentication fails."""
    bkey, files = chain
    _, body = manifest(files[1], bkey)
    at = body["chunks"][0]["offset"] + 40
    data = bytearray(files[1].read_bytes())
    data[at] ^= 0x01
    files[1].write_bytes(bytes(data))
    message = await refused(tmp_path, files, bkey, BackupCorrupt)
    assert "chunk 0" in message


async def test_an_incremental_restored_alone_is_refused(
    tmp_path: Path, chain: tuple[BackupKey, list[Path]]
) -> None:
    bkey, files = chain
    await refused(tmp_path, [files[1]], bkey, BackupError)


async def test_writes_committed_while_an_incremental_is_taken_are_not_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point in time, as for a full page backup: writes committed (and checkpointed)
    after the incremental's snapshot and before its heads are read are not in it."""
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 12)
        await backup(src, full, bkey)
        await src.save("t1/a004", {"between": 1})
        before = await contents(src)
        loop = asyncio.get_running_loop()
        plan = sqlite_pages.PageSnapshot.plan

        def planned(snapshot: sqlite_pages.PageSnapshot) -> None:  # the backup's thread
            asyncio.run_coroutine_threadsafe(write_during(src), loop).result()
            checkpoint = sqlite3.connect(db)
            try:
                checkpoint.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                checkpoint.close()
            plan(snapshot)

        heads_of = filecopy._heads_of

        def heads(conn: sqlite3.Connection, *args: Any) -> Any:
            asyncio.run_coroutine_threadsafe(write_before_heads(src), loop).result()
            return heads_of(conn, *args)

        monkeypatch.setattr(sqlite_pages.PageSnapshot, "plan", planned)
        monkeypatch.setattr(filecopy, "_heads_of", heads)
        await page_incremental(src, inc, bkey, full)
        monkeypatch.undo()
        assert await src.head("t0/a000") == 5 and await src.head("t1/a001") == 0
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [full, inc], bkey)
        assert await contents(dst) == before


async def test_an_incremental_whose_page_list_or_digests_were_edited_is_refused(
    tmp_path: Path, chain: tuple[BackupKey, list[Path]]
) -> None:
    """The manifest edited and sealed again with the backup key (a key holder, or a
    writer bug): a page digest, the list of pages shipped, the page count. The image
    rebuilt from the chain must digest to the last manifest's pages: each is refused,
    nothing restored."""
    bkey, files = chain
    data = files[2].read_bytes()

    def flip_digest(m: dict[str, Any]) -> None:
        m["page_digests"] = bytes([m["page_digests"][0] ^ 1]) + m["page_digests"][1:]

    edits: dict[str, Any] = {
        "a page digest": (flip_digest, "page digests"),
        "a page left out": (lambda m: m.__setitem__("changed", m["changed"][:-4]), "more pages"),
        "pages reordered": (lambda m: m.__setitem__("changed", m["changed"][::-1]), "order"),
        "the page count": (lambda m: m.__setitem__("pages", m["pages"] + 1), "malformed"),
    }
    for what, (edit, reason) in edits.items():
        files[2].write_bytes(reseal_manifest(data, bkey, edit))
        message = await refused(tmp_path, files, bkey, BackupCorrupt)
        assert reason in message, (what, message)


async def test_a_row_incremental_after_a_page_incremental_restores_as_one_chain(
    tmp_path: Path,
) -> None:
    """The chain moved to another engine (restored into memory) and went on there:
    its next incremental (rows, the engine has no pages) follows the page incremental,
    and full + pages + rows restore together."""
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / f"{n}.skb" for n in ("full", "pages", "rows")]
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 20)
        await backup(src, files[0], bkey)
        await src.save("t0/a000", {"on": "sqlite"})
        await page_incremental(src, files[1], bkey, files[0])
    async with StateStore("memory://", keyring=keyring()) as moved:
        await restore(moved, files[:2], bkey)
        await moved.save("t0/a000", {"on": "memory"})
        await moved.delete("t1/a001")
        made = await backup(moved, files[2], bkey, since=files[1])
        assert (made.copied, made.deleted) == (1, 1)
        assert manifest(files[2], bkey)[0] == 1
        expected = await contents(moved)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, files, bkey)
        assert await contents(dst) == expected
        assert (await dst.verify()).ok
