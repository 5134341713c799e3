"""The C check of a run of stored plain appends (``statekeeper.codec._appendrun``) held
to the Python checks on random runs (hypothesis): valid runs, runs damaged one way
(a byte flipped, cut, added, rows swapped) and runs re-chained around an odd body
(a ``$``, ``\\``, ``"``, NUL, non-UTF-8 in the pointer, JSON orjson and Python's
decoder disagree on), seqs near the 64-bit edges, timestamps NaN, inf, -0.0, event
types and agent ids not ASCII. Where the C module accepts a run, Python accepts it
with the same pointer, values and last link; where Python accepts, so does C."""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from statekeeper.codec import appends, pipeline

HEAD = b'{"ops":[{"op":"add","path":"'
AT = b'","value":'
END = b"}]}"


def _native() -> Any:
    native = getattr(appends, "_APPEND_NATIVE", "missing")
    if native is None:
        pytest.skip("the C module is not built here (or STATEKEEPER_PURE is set)")
    return native


def _seal(agent: str, seq: int, kind: str, ts: float, payload: bytes) -> bytes:
    try:
        pack = pipeline._seq_ts.pack(seq, ts)
    except struct.error:
        return bytes(32)
    return hashlib.sha256(b"sk-link/1" + pipeline._names(agent, kind) + pack + payload).digest()


def _chain(agent: str, rows: list[tuple[int, str, float, bytes]], link: bytes) -> list[Any]:
    """Rows of bodies, each stored behind its link and sealed as a store seals it."""
    out: list[Any] = []
    for seq, kind, ts, body in rows:
        payload = pipeline._SHA_JSON + link + body
        link = _seal(agent, seq, kind, ts, payload)
        out.append((seq, kind, ts, payload, link))
    return out


def _answer(agent: str, events: Any, link: Any, native: Any) -> tuple[str, Any]:
    old = appends._APPEND_NATIVE
    appends._APPEND_NATIVE = native
    try:
        return ("ok", appends.appends_checked(agent, events, link))
    except Exception as exc:  # (the Python checks raise what they raise)
        return ("raised", type(exc))
    finally:
        appends._APPEND_NATIVE = old


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN and -0.0 included (orjson parses neither, but be strict)."""
    return repr(a) == repr(b) and type(a) is type(b)


def _check(agent: str, events: Any, link: Any) -> tuple[str, Any]:
    native = _native()
    pure = _answer(agent, events, link, None)
    got = _answer(agent, events, link, native)
    if got[0] == "ok" and got[1] is not None:  # (C accepts: Python must, the same)
        assert pure[0] == "ok" and pure[1] is not None, (pure, got)
        assert _same(got[1], pure[1]), (pure, got)
        assert type(got[1][0]) is str and type(got[1][1]) is list
    if pure[0] == "ok" and pure[1] is not None:  # (Python accepts: so does C)
        assert _same(got, pure), (pure, got)
    if got[0] == "raised":
        assert got == pure
    event(f"C {_kind(got)}, Python {_kind(pure)}")
    return got


def _kind(answer: tuple[str, Any]) -> str:
    return answer[0] if answer[0] == "raised" else "refuses" if answer[1] is None else "accepts"


# pieces of a body, valid and not
POINTERS = st.one_of(
    st.sampled_from([b"/messages/-", b"", b"/-", b"/a~1b/-", b"/m\xc3\xa9/-"]),
    st.binary(max_size=12),
    st.lists(
        st.sampled_from([b"/", b"m", b"$", b"\\", b'"', b"\x00", b"\xff", b"\xed\xa0\x80", b"-"]),
        max_size=6,
    ).map(b"".join),
)
ODD_JSON = [
    b'{"a":1,"a":2}',  # (duplicate keys)
    b"123456789012345678901234567890",  # (past 64 bits)
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-0.0",
    b"-0",
    b"1.0e-400",
    b"0.1e1",
    b" 1 ",
    b"\t\r\n1\n",
    b"1 2",
    b"1,2",
    b"[1],[2]",
    b"[1]]",
    b"[[1]",
    b"{}x",
    b'"a\x00b"',
    b'"\\u0000"',
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'"\xef\xbb\xbf"',
    b"\xef\xbb\xbf1",
    b'"\\u0024"',
    b"01",
    b"+1",
    b".5",
    b"true",
    b"null",
    b"tru",
    b'"\n"',
    b"",
    b" ",
    b"}]}",
    b'1}]},{"op":"add","path":"/x","value":2',
    b"[" * 600 + b"]" * 600,
    b"[" * 2000 + b"]" * 2000,
]
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**64),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def _dumps(value: Any) -> bytes:
    import json

    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


VALUES = st.one_of(
    JSON_VALUES.map(_dumps),
    st.sampled_from(ODD_JSON),
    st.binary(max_size=10),
    st.lists(
        st.sampled_from([b"1", b",", b"[", b"]", b"{", b"}", b'"', b"$", b"\\", b" ", b"\x00"]),
        max_size=8,
    ).map(b"".join),
)
SEQ_STARTS = st.one_of(
    st.integers(1, 1000),
    st.integers(-(2**63) - 2, -(2**63) + 2),
    st.integers(2**63 - 20, 2**63 + 2),
    st.integers(-5, 5),
)
STAMPS = st.one_of(
    st.floats(),
    st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324]),
    st.binary(min_size=8, max_size=8).map(lambda b: struct.unpack(">d", b)[0]),
)
NAMES = st.one_of(st.sampled_from(["save", "chat", "é", "💬", "\ud800", ""]), st.text(max_size=6))


@st.composite
def runs(draw: st.DrawFn) -> tuple[str, list[Any], bytes]:
    agent = draw(NAMES)
    kind = draw(NAMES)
    n = draw(st.integers(1, 16))
    start = draw(SEQ_STARTS)
    same_pointer = draw(st.integers(0, 3)) > 0
    pointer = draw(POINTERS) if draw(st.booleans()) else b"/messages/-"
    odd = draw(st.integers(0, 2)) == 0
    rows: list[tuple[int, str, float, bytes]] = []
    for i in range(n):
        here = pointer if same_pointer else draw(POINTERS)
        value = (
            draw(VALUES) if odd and draw(st.integers(0, 3)) == 0 else draw(JSON_VALUES.map(_dumps))
        )
        body = HEAD + here + AT + value + END
        if odd and draw(st.integers(0, 15)) == 0:
            body = draw(st.binary(max_size=40)) if draw(st.booleans()) else body[:-1]
        rows.append((start + i, kind, draw(STAMPS), body))
    link = draw(st.one_of(st.just(bytes(32)), st.binary(min_size=32, max_size=32)))
    return agent, _chain(agent, rows, link), link


def _flip(data: bytes, at: int, bit: int) -> bytes:
    if not data:
        return b"\x01"
    at %= len(data)
    return data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1 :]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(runs())
def test_random_runs_answer_as_python(run: tuple[str, list[Any], bytes]) -> None:
    agent, events, link = run
    _check(agent, events, link)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(runs(), st.data())
def test_damaged_runs_answer_as_python(run: tuple[str, list[Any], bytes], data: Any) -> None:
    agent, events, link = run
    events = list(events)
    i = data.draw(st.integers(0, len(events) - 1))
    seq, kind, ts, payload, checksum = events[i]
    how = data.draw(
        st.sampled_from(
            [
                "flip payload",
                "flip checksum",
                "cut",
                "extend",
                "swap",
                "link",
                "seq",
                "ts",
                "kind",
                "drop",
                "rechain",
            ]
        )
    )
    at, bit = data.draw(st.integers(0, 10**6)), data.draw(st.integers(0, 7))
    if how == "flip payload":
        events[i] = (seq, kind, ts, _flip(payload, at, bit), checksum)
    elif how == "flip checksum":
        events[i] = (seq, kind, ts, payload, _flip(checksum, at, bit))
    elif how == "cut":
        events[i] = (seq, kind, ts, payload[: at % (len(payload) + 1)], checksum)
    elif how == "extend":
        events[i] = (
            seq,
            kind,
            ts,
            payload + data.draw(st.binary(min_size=1, max_size=4)),
            checksum,
        )
    elif how == "swap" and len(events) > 1:
        j = (i + 1 + at % (len(events) - 1)) % len(events)
        events[i], events[j] = events[j], events[i]
    elif how == "link":
        link = _flip(link, at, bit)
    elif how == "seq":
        events[i] = (seq + 1, kind, ts, payload, checksum)
    elif how == "ts":
        events[i] = (
            seq,
            kind,
            math.nextafter(ts, math.inf) if ts == ts else 0.0,
            payload,
            checksum,
        )
    elif how == "kind":
        events[i] = (seq, kind + "x", ts, payload, checksum)
    elif how == "drop" and len(events) > 1:
        del events[i]
    elif how == "rechain":  # (a body changed and every checksum after it recomputed)
        body = _flip(payload[35:], at, bit)
        rows = [(r[0], r[1], r[2], r[3][35:]) for r in events]
        rows[i] = (seq, kind, ts, body)
        events = _chain(agent, rows, link)
    _check(agent, events, link)
