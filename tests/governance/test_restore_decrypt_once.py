"""A full file backup's image is decrypted once per restore (both passes read it):
every chunk is still authenticated and checked against the manifest, and an edited
chunk still refuses the whole restore, nothing written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import keyring
from .test_backup_page_delta import contents, fill


async def test_a_file_backup_is_decrypted_once_and_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 40)
        await backup(src, file, bkey, chunk_bytes=16 << 10)
        expected = await contents(src)
    reads: list[str] = []
    chunks = FrameReader.chunks

    def counted(self: FrameReader, raw: bool = False) -> Any:
        reads.append(self.path)
        return chunks(self, raw)

    monkeypatch.setattr(FrameReader, "chunks", counted)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [file], bkey)
        assert await contents(dst) == expected
    assert reads == [str(file)]  # was twice: once per pass
    monkeypatch.undo()

    data = bytearray(file.read_bytes())
    reader = FrameReader(file, bkey)
    try:
        entry = reader.manifest["chunks"][-1]
    finally:
        reader.close()
    data[entry["offset"] + entry["length"] // 2] ^= 1
    file.write_bytes(bytes(data))
    async with StateStore(f"sqlite:///{tmp_path / 'x.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupCorrupt, match="authentication"):
            await restore(dst, [file], bkey)
        assert [a async for a in dst.iter_agents()] == []
