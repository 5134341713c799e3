"""A snapshot's view of the WAL (:mod:`.pages`): the wal-index header's counts and the
offsets of the frames the snapshot sees, page by page."""

from __future__ import annotations

import sqlite3
import sys

__all__ = ["NBACKFILL", "snapshot_frames", "wal_index"]

_WAL_HEADER = 32
_FRAME_HEADER = 24
_SHM_HEADER = 48  # one copy of the wal-index header (two copies, then checkpoint info)
#: where the wal-index's ``nBackfill`` is
NBACKFILL = 96
_ORDER = sys.byteorder  # the wal-index header is in the machine's byte order


def wal_index(index: bytes, page_size: int) -> tuple[int, int, bytes] | None:
    """``(mxFrame, nBackfill, salt)`` from the wal-index's first bytes, or None
    when the header is not initialised, its two copies differ, or it disagrees with
    the page size."""
    if len(index) < NBACKFILL + 4 or index[:_SHM_HEADER] != index[_SHM_HEADER : 2 * _SHM_HEADER]:
        return None
    if not index[12]:  # isInit
        return None
    frames = int.from_bytes(index[16:20], _ORDER)
    encoded = int.from_bytes(index[14:16], _ORDER)  # 0 while the WAL has no frame
    if frames and (65536 if encoded == 1 else encoded) != page_size:
        return None
    backfilled = int.from_bytes(index[NBACKFILL : NBACKFILL + 4], _ORDER)
    return frames, backfilled, bytes(index[32:40])


def snapshot_frames(wal: str, page_size: int, count: int, salt: bytes) -> dict[int, int]:
    """Page number -> offset of the page's latest frame among the WAL's first
    ``count`` (all of the snapshot's, each checked to carry the WAL's salt)."""
    out: dict[int, int] = {}
    step = _FRAME_HEADER + page_size
    with open(wal, "rb") as fh:
        head = fh.read(_WAL_HEADER)
        if head[16:24] != salt:
            raise sqlite3.DatabaseError(f"{wal}: its salt is not the wal-index's")
        for i in range(count):
            at = _WAL_HEADER + i * step
            fh.seek(at)
            frame = fh.read(_FRAME_HEADER)
            if len(frame) < _FRAME_HEADER or frame[8:16] != salt:
                raise sqlite3.DatabaseError(f"{wal}: frame {i + 1} is not the snapshot's")
            out[int.from_bytes(frame[:4], "big")] = at + _FRAME_HEADER
    return out
