"""A file backup's sealer hands its buffers back once their chunk is written (the
image's pieces through ``spare``, the ciphertexts internally): every chunk still
reads back as fed, whatever was in a reused buffer before."""

from __future__ import annotations

import os
from pathlib import Path

from statekeeper.governance.backup.fileformat import (
    BackupKey,
    FrameReader,
    FrameWriter,
    Header,
)
from statekeeper.governance.backup.sealer import ChunkSealer

CHUNK = 4096


def _pieces(count: int) -> list[bytes]:
    # half compressible (zeros), half not: the ciphertexts differ in size
    return [
        bytes(CHUNK // 2) + os.urandom(CHUNK // 2) if i % 2 else os.urandom(CHUNK)
        for i in range(count)
    ]


def test_reused_buffers_seal_every_chunk_as_fed(tmp_path: Path) -> None:
    key = BackupKey(bytes(range(40, 72)))
    header = Header.new("b1", None, key, 0.0, version=2)
    pieces = _pieces(40)
    fed: list[int] = []
    reused = 0
    with open(tmp_path / "b.skb", "wb") as out:
        writer = FrameWriter(out, header, key)
        sealer = ChunkSealer(writer, CHUNK, 2, -20)
        for piece in pieces:
            buf = sealer.spare(CHUNK)
            if buf is None:
                buf = bytearray(CHUNK)
            else:
                reused += 1
                assert id(buf) in fed  # one the sealer was given, its chunk written
            buf[:] = piece  # every byte overwritten, as the page image does
            fed.append(id(buf))
            sealer.feed(buf, owned=True)
        assert sealer.close() == CHUNK * len(pieces)
        assert sealer.spare(CHUNK + 1) is None  # only a buffer of the size asked
        writer.finish({"backup_id": "b1", "file_bytes": CHUNK * len(pieces)})
    assert reused >= len(pieces) - 4  # a few in flight, the rest taken again
    reader = FrameReader(tmp_path / "b.skb", key)
    try:
        assert list(reader.file_chunks()) == pieces
    finally:
        reader.close()
