"""The C build + seal of a lean append (``statekeeper.store._leanseal``, a measurement
prototype: docs/benchmarks.md, "lgsmallc") makes the bytes the Python path makes."""

from __future__ import annotations

import pytest

pytest.importorskip("statekeeper.store._leanseal")

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.codec.depth import bounded
from statekeeper.codec.pipeline import BLAKE3_FROM, Codec
from statekeeper.store.lean import _native_sealer, body_around

_CODEC = Codec(compression="zstd")
_PACK = _CODEC.compressed_sealer()
_TAG = _CODEC.head_tagger()
_NATIVE = _native_sealer(_CODEC)

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
_ops = st.lists(
    st.fixed_dictionaries(
        {"op": st.sampled_from(["add", "replace"]), "path": st.text(max_size=20), "value": _json}
    ),
    max_size=6,
)


def _python(agent, rtype, seq, ts, ops_json, key, prev):
    body = body_around(ops_json, key)
    if (0x24 in body and b'"$t"' in body) or not bounded(body) or len(body) >= BLAKE3_FROM:
        return None
    payload, checksum, link = _PACK(agent, seq, rtype, ts, body, prev)
    return payload, checksum, link, _TAG(agent, seq, link)


@settings(max_examples=400, deadline=None)
@given(
    agent=st.text(min_size=1, max_size=30),
    rtype=st.sampled_from(["lg.batch", "lg.cp", "lg.run", "é"]),
    seq=st.integers(1, 2**62),
    ts=st.floats(0, 2e9),
    ops=_ops,
    key=st.none() | st.text(max_size=24),
    prev=st.binary(min_size=32, max_size=32),
)
def test_native_seal_is_the_python_bytes(agent, rtype, seq, ts, ops, key, prev) -> None:
    ops_json = orjson.dumps(ops)
    got = _NATIVE(agent, rtype, seq, ts, ops_json, key, prev)
    want = _python(agent, rtype, seq, ts, ops_json, key, prev)
    if got is not None:
        assert got == want
    elif want is not None:  # declined: only a key JSON escapes, a name with surrogates
        plain_key = key is None or (key.isascii() and not any(c in '"\\' or c < " " for c in key))
        assert not plain_key or any(0xD800 <= ord(c) < 0xE000 for c in agent)


@pytest.mark.parametrize("size", [0, 10, 63, 64, 65, 300, 3000, 4090])
def test_native_seal_each_side_of_the_sizes(size: int) -> None:
    ops_json = orjson.dumps([{"op": "add", "path": "/a", "value": "x" * size}])
    for key in (None, "k123"):
        got = _NATIVE("agent", "lg.cp", 7, 1.5, ops_json, key, bytes(32))
        assert got == _python("agent", "lg.cp", 7, 1.5, ops_json, key, bytes(32))
    deep = orjson.dumps([{"op": "add", "path": "/" * 260, "value": 1}])
    assert _NATIVE("a", "t", 1, 1.0, deep, None, bytes(32)) is None
    tagged = orjson.dumps([{"op": "add", "path": "/a", "value": {"$t": 1}}])
    assert _NATIVE("a", "t", 1, 1.0, tagged, None, bytes(32)) is None
