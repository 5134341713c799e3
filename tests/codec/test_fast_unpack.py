"""msgpack bodies (a save's packed snapshot, a msgpack store's records) are parsed by
``ormsgpack`` when it is installed (~13 us instead of ~21 us for a 33 KB chat snapshot,
docs/benchmarks.md "coldload"), and the documents read are those ``msgpack`` reads: a
body ``ormsgpack`` refuses is parsed by ``msgpack``, which raises or answers as before."""

from __future__ import annotations

from typing import Any

import msgpack  # type: ignore[import-untyped]
import ormsgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.codec import formats
from statekeeper.codec.formats import MSGPACK, Format, fast_unpackb

PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5)
        # "$t" is the codec's tag key: a map holding it is a tagged value, not plain
        | st.dictionaries(st.text(max_size=8).filter(lambda k: k != "$t"), inner, max_size=5)
    ),
    max_leaves=30,
)


def _reference(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)


def test_ormsgpack_is_the_parser_when_installed() -> None:
    assert fast_unpackb() is ormsgpack.unpackb
    assert Format(MSGPACK, None)._fast is ormsgpack.unpackb


@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_a_plain_document_parses_as_msgpack_parses_it(doc: Any) -> None:
    body = msgpack.packb(doc, use_bin_type=True)
    fmt = Format(MSGPACK, None)
    assert fmt.loads_plain(body) == _reference(body)
    assert fmt.loads(body) == _reference(body)


def test_a_body_ormsgpack_refuses_is_msgpacks_answer() -> None:
    fmt = Format(MSGPACK, None)
    ext = msgpack.packb({"a": msgpack.ExtType(5, b"x")})
    assert fmt.loads_plain(ext) == _reference(ext)  # (ormsgpack: "ext_hook missing")
    for bad in (msgpack.packb({1: 2}), b"\xc1", msgpack.packb({"a": "b"})[:-1]):
        with pytest.raises(ValueError):
            _reference(bad)
        with pytest.raises(ValueError):
            fmt.loads_plain(bad)


async def test_a_cold_load_parses_its_packed_snapshot_with_the_fast_parser(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counted(data: Any) -> Any:
        calls.append(len(data))
        return ormsgpack.unpackb(data)

    monkeypatch.setattr(formats, "_FAST_UNPACKB", counted)
    url = f"sqlite:///{tmp_path}/s.db"
    messages = [{"role": "user", "content": f"message {i} " * 20} for i in range(5)]
    async with StateStore(url, snapshot_every=5) as store:
        for i in range(5):
            await store.save("a", {"messages": messages[: i + 1]})
    async with StateStore(url, cache_size=0) as store:
        calls.clear()
        snap = await store.load("a")
    assert snap.data == {"messages": messages}
    assert calls and calls[0] > 1000  # the snapshot's body (its 5 messages), not an event


def test_without_ormsgpack_msgpack_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "_FAST_UNPACKB", None)
    fmt = Format(MSGPACK, None)
    assert fmt._fast is None
    body = msgpack.packb({"messages": [{"role": "user", "content": "hi"}], "n": 2**64 - 1})
    assert fmt.loads_plain(body) == _reference(body)
