"""``has_marker``: whether a stored body may hold a typed value (the tag key ``"$t"``),
found from its ``$`` bytes (``memchr``) rather than by scanning for the whole tag; and a
msgpack snapshot whose other bytes hold ``$`` (a float's) still loads its typed values."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import msgpack  # type: ignore[import-untyped]
import orjson
import pytest

from statekeeper import StateStore
from statekeeper.codec.formats import has_marker

PACKED = b"\xa2$t"
JSON = b'"$t"'


@pytest.mark.parametrize(
    ("body", "marker", "expected"),
    [
        (b"", PACKED, False),
        (b"$", PACKED, False),
        (b"$t", PACKED, False),  # no room for the byte before the "$"
        (b"\xa2$t", PACKED, True),
        (b"\xa2$", PACKED, False),
        (b"x$t\xa2$u\xa2$t", PACKED, True),
        (b"$" * 40, PACKED, False),  # many "$": the fallback scan
        (b"$" * 40 + b"\xa2$t", PACKED, True),
        (orjson.dumps({"price": "$5", "v": {"$t": "set", "v": []}}), JSON, True),
        (orjson.dumps({"price": "$5", "note": "$t"}), JSON, True),  # (a string: from_plain decides)
        (msgpack.packb({"$t": "datetime"}), PACKED, True),
        (msgpack.packb({"at": struct.unpack(">d", b"A\xda\xc4$\xfa\x999\xd9")[0]}), PACKED, False),
    ],
)
def test_has_marker_is_marker_in_body(body: bytes, marker: bytes, expected: bool) -> None:
    assert has_marker(body, marker) is expected is (marker in body)
    # the same answer for the body in any buffer (a memoryview's was always False)
    assert has_marker(bytearray(body), marker) is expected
    assert has_marker(memoryview(body), marker) is expected
    assert has_marker(b"ab" + body, marker, 2) is expected
    assert has_marker(memoryview(b"ab" + body), marker, 2) is expected


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_body_parsed_from_a_view_keeps_its_typed_values(fmt: str) -> None:
    from statekeeper.codec import Codec

    codec = Codec(format=fmt)
    doc = {"at": dt.datetime(2026, 12, 4, 13, 0, tzinfo=dt.UTC), "tags": {"a"}}
    body = codec.serialize(doc)
    assert codec.deserialize(memoryview(body)) == doc  # (was: {"$t": "datetime", ...})
    assert codec.deserialize(bytearray(body)) == doc


# a timestamp whose packed float holds a "$" byte (0x24), as ~1 load in 10 had
DOLLAR_TIME = struct.unpack(">d", b"A\xda\xc4$\xfa\x999\xd9")[0]


async def test_a_msgpack_snapshot_with_dollar_bytes_keeps_its_typed_values(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}?synchronous=OFF"
    when = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    async with StateStore(url, snapshot_every=2, clock=lambda: DOLLAR_TIME) as store:
        await store.save("a", {"messages": ["$1", "$2"]})
        await store.save("a", {"messages": ["$1", "$2"], "at": when, "tags": {"x"}})
        snap = await store.backend.latest_snapshot("a")
        assert snap is not None and snap.seq == 2 and b"$" in snap.payload
    async with StateStore(url, cache_size=0) as cold:
        loaded = await cold.load("a")
    assert loaded.data == {"messages": ["$1", "$2"], "at": when, "tags": {"x"}}
    async with StateStore(url) as cached:  # the cache's copy goes through the codec
        assert (await cached.load("a")).data["at"] == when
        assert (await cached.load("a")).data["tags"] == {"x"}


@pytest.mark.parametrize(
    ("body", "start", "expected"),
    [
        (b"\xa2$t" + b"x" * 40, 3, False),  # the tag before start: not in body[start:]
        (b"x" * 35 + b"\xa2$t", 35, True),  # right at start
        (b"x" * 34 + b"\xa2$t", 35, False),  # one byte before start
        (b"\xa2$t" * 2 + b"$" * 40 + b"\xa2$t", 6, True),  # many "$": the fallback
        (b"\xa2$t" * 2 + b"$" * 40, 6, False),
    ],
)
def test_has_marker_looks_from_start_only(body: bytes, start: int, expected: bool) -> None:
    assert has_marker(body, PACKED, start) is expected
    assert has_marker(body, PACKED, start) is has_marker(body[start:], PACKED)
    assert has_marker(bytearray(body), PACKED, start) is expected  # type: ignore[arg-type]
