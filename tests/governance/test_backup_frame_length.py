"""A frame whose length field was edited to more than the file holds is refused as
corrupt (a typed error naming the frame), never read into memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey
from statekeeper.governance.backup.fileformat import MAGIC, FrameReader, FrameWriter, Header


def test_an_edited_frame_length_is_refused_not_read(tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    header = Header.new("id1", None, key, 0.0)
    with open(file, "wb") as out:
        writer = FrameWriter(out, header, key)
        writer.chunk([1, 2], 1)
        writer.finish({"backup_id": "id1"})
    data = bytearray(file.read_bytes())
    data[len(MAGIC) + 4 + len(header.raw) + 1] = 0x7F  # the first chunk's length: 2**62 and more
    file.write_bytes(bytes(data))
    reader = FrameReader(file, key)
    try:
        with pytest.raises(BackupCorrupt, match="chunk 0"):
            list(reader.chunks())
    finally:
        reader.close()
