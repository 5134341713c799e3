"""A chunk's zero-run frame (``native/pagepass.c``: ``zero_run_frame``) is exactly the
frame its definition gives: every run of 32 zeros or more, as long as it goes, as RLE
blocks, the bytes between in raw blocks, each block at most 128 KiB, the last one
flagged. The C scan looks only at the 16 bytes at each multiple of 16 (a run of 32
holds one such in whole, docs/benchmarks.md "backup8"): runs of 31, 32 and 33 zeros
at every offset against those multiples, at the ends, and across a block's largest
size are framed as the reference (in Python, below) frames them."""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.backends.sqlite import pagepass as sqlite_pagepass

BLOCK_MAX = 128 * 1024


def _frame() -> object:
    if sqlite_pagepass.zero_run_frame is None:
        pytest.skip("the C pass is not built (or STATEKEEPER_PURE=1)")
    return sqlite_pagepass.zero_run_frame


def reference(data: bytes) -> bytes:
    """The frame by its definition."""
    out = bytearray(b"\x28\xb5\x2f\xfd\xc0\x38" + struct.pack("<Q", len(data)))
    if not data:
        return bytes(out + b"\x01\x00\x00")
    pieces: list[tuple[int, int, int]] = []  # (kind, start, end): 0 raw, 1 zeros
    at = 0
    for run in re.finditer(rb"\x00{32,}", data):
        if run.start() > at:
            pieces.append((0, at, run.start()))
        pieces.append((1, run.start(), run.end()))
        at = run.end()
    if at < len(data):
        pieces.append((0, at, len(data)))
    for kind, start, end in pieces:
        while start < end:
            size = min(end - start, BLOCK_MAX)
            head = (start + size == len(data)) | (kind << 1) | (size << 3)
            out += head.to_bytes(3, "little")
            out += data[start : start + size] if kind == 0 else b"\x00"
            start += size
    return bytes(out)


#: runs of zeros around 32 and 16, short noise, long pieces around a block's size
PIECES = st.lists(
    st.one_of(
        st.sampled_from([1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 64, 131072, 131073]).map(bytes),
        st.binary(min_size=1, max_size=40),
        st.sampled_from([1, 31, 131072]).map(lambda n: b"\x07" * n),
    ),
    max_size=10,
).map(b"".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=PIECES, offset=st.integers(0, 31))
def test_the_frame_is_the_definitions(data: bytes, offset: int) -> None:
    frame = _frame()
    shifted = bytes(offset) + data  # (the runs at every offset against the multiples of 16)
    assert frame(shifted) == reference(shifted)  # type: ignore[operator]
    assert frame(data[offset:]) == reference(data[offset:])  # type: ignore[operator]


@pytest.mark.parametrize("length", [31, 32, 33])
@pytest.mark.parametrize("at", range(0, 40))
def test_a_run_at_each_offset(at: int, length: int) -> None:
    frame = _frame()
    for tail in (b"", b"\x01", b"\x01" * 40):
        data = b"\x01" * at + bytes(length) + tail
        assert frame(data) == reference(data)  # type: ignore[operator]
