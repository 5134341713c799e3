"""A run of stored plain appends is checked by the C module where it is built
(``statekeeper.codec._appendrun``, ``appends.appends_checked``): no Python hash or loop
a record, and the same answer as the Python checks for every run, valid or not
(docs/benchmarks.md, "coldchain")."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from statekeeper.codec import ZERO_LINK, Codec, appends, pipeline

AGENT = "chat"
KIND = "save"
BODY = b'{"ops":[{"op":"add","path":"/messages/-","value":%s}]}'


def _native() -> Any:
    native = getattr(appends, "_APPEND_NATIVE", "missing")
    if native is None:
        pytest.skip("the C module is not built here (or STATEKEEPER_PURE is set)")
    return native


def _seal(seq: Any, kind: Any, ts: Any, payload: bytes) -> bytes:
    pack = pipeline._seq_ts.pack(seq, ts)
    return hashlib.sha256(b"sk-link/1" + pipeline._names(AGENT, kind) + pack + payload).digest()


def _run(bodies: list[bytes], link: bytes = ZERO_LINK, first: int = 1) -> list[Any]:
    """Rows of ``bodies`` chained from ``link``, each sealed as a store seals it."""
    rows: list[Any] = []
    for i, body in enumerate(bodies):
        seq, ts = first + i, 1_700_000_000.5 + i
        payload = pipeline._SHA_JSON + link + body
        link = _seal(seq, KIND, ts, payload)
        rows.append((seq, KIND, ts, payload, link))
    return rows


def _values(n: int) -> list[bytes]:
    return [
        orjson.dumps({"role": "user", "content": f'm{i} ],[ "q" ' + "é " * 30, "n": [i, 1.5]})
        for i in range(n)
    ]


def _resealed(row: Any, link: bytes, payload: bytes) -> tuple[Any, ...]:
    seq, kind, ts = row[0], row[1], row[2]
    return (seq, kind, ts, payload, _seal(seq, kind, ts, payload))


def _pure(monkeypatch: pytest.MonkeyPatch, events: Any, link: Any) -> Any:
    with monkeypatch.context() as m:
        m.setattr(appends, "_APPEND_NATIVE", None)
        try:
            return ("ok", appends.appends_checked(AGENT, events, link))
        except Exception as exc:  # (the Python checks raise what they raise)
            return ("raised", type(exc))


def _both(monkeypatch: pytest.MonkeyPatch, events: Any, link: Any = ZERO_LINK) -> Any:
    pure = _pure(monkeypatch, events, link)
    native: tuple[str, Any]
    try:
        native = ("ok", appends.appends_checked(AGENT, events, link))
    except Exception as exc:
        native = ("raised", type(exc))
    assert native == pure
    if pure[0] == "ok" and pure[1] is not None:
        got: Any = native[1]
        assert type(got[0]) is str and type(got[1]) is list
    return native[1] if native[0] == "ok" else native


@pytest.mark.parametrize("n", [1, 3, 20])
def test_a_run_is_checked_without_a_python_hash_a_record(
    monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    _native()
    events = _run([BODY % v for v in _values(n)])
    hashed: list[int] = []

    def sha256(data: bytes = b"") -> Any:
        hashed.append(len(data))
        return hashlib.sha256(data)

    monkeypatch.setattr(appends, "hashlib", SimpleNamespace(sha256=sha256))
    got = Codec().decode_appends(AGENT, events, ZERO_LINK)
    assert hashed == []  # (before: one SHA-256 of Python's a record)
    assert got is not None
    assert got[0] == "/messages/-"
    assert got[1] == [orjson.loads(v) for v in _values(n)]
    assert got[2] == events[-1][4]


@pytest.mark.parametrize("n", [1, 2, 7, 12, 13, 30])
def test_valid_runs_answer_as_python(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    _native()
    events = _run([BODY % v for v in _values(n)])
    got = _both(monkeypatch, events)
    assert got is not None and got[2] == events[-1][4]
    link = hashlib.sha256(b"x").digest()  # (any link before the run)
    assert _both(monkeypatch, _run([BODY % v for v in _values(n)], link, 40), link) is not None


def _bodies(n: int = 4) -> list[bytes]:
    return [BODY % v for v in _values(n)]


def _damaged() -> list[tuple[str, list[Any], bytes]]:
    """Runs that must not verify or are not one list's plain appends."""
    out: list[tuple[str, list[Any], bytes]] = []
    ok = _run(_bodies())
    flipped = list(ok)
    row = flipped[2]
    flipped[2] = (*row[:4], bytes([row[4][0] ^ 1]) + row[4][1:])
    out.append(("checksum", flipped, ZERO_LINK))
    out.append(("start link", ok, hashlib.sha256(b"other").digest()))
    swapped = list(ok)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    out.append(("order", swapped, ZERO_LINK))
    values = [b"1", b"1,2", b"", b"[1", b'"x', b"nul", b'{"a": 1} ', b"\n2\n"]
    for value in values:
        out.append((f"value {value!r}", _run([*_bodies(2), BODY % value]), ZERO_LINK))
    bodies = [
        b'{"ops":[{"op":"add","path":"/messages/-","value":{"$t":"x"}}]}',
        b'{"ops":[{"op":"add","path":"/m$/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/m\\\\/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/m\xff/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/other/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/messages/-","value":1}]} ',
        b'{"ops":[{"op":"add","path":"/messages/-","value":1}]',
        b'{"ops":[{"op":"add","path":"/messages/-","value":1},{"op":"add","path":"/x","value":2}]}',
        b'{"ops":[{"op":"replace","path":"/messages/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/messages/-","value":1}]}',
        b'{"ops":[{"op":"add","path":"/messages/-"}]}',
        b'{"ops":[{"op":"add","path":"',
        b"",
    ]
    for body in bodies:
        out.append((f"body {body!r}", _run([*_bodies(2), body]), ZERO_LINK))
        out.append((f"alone {body!r}", _run([body]), ZERO_LINK))
    b3 = list(_run(_bodies(2)))
    payload = bytes([1, 0x40, 0]) + b3[1][3][3:]
    b3[1] = _resealed(b3[1], b3[0][4], payload)
    out.append(("blake3 header", b3, ZERO_LINK))
    return out


@pytest.mark.parametrize("name,events,link", _damaged(), ids=lambda x: None)
def test_damaged_or_other_runs_answer_as_python(
    monkeypatch: pytest.MonkeyPatch, name: str, events: list[Any], link: bytes
) -> None:
    _native()
    _both(monkeypatch, events, link)


def _odd_rows() -> list[tuple[str, Any]]:
    """Rows the C check does not take as they are: Python answers (or raises) for them."""
    ok = _run(_bodies(3))
    out: list[tuple[str, Any]] = [
        ("tuple of rows", tuple(ok)),
        ("rows as lists", [list(r) for r in ok]),
    ]
    mixed = list(ok)
    row = mixed[1]
    mixed[1] = (row[0], "other", row[2], row[3], _seal(row[0], "other", row[2], row[3]))
    mixed[2] = _resealed(mixed[2], mixed[1][4], pipeline._SHA_JSON + mixed[1][4] + mixed[2][3][35:])
    out.append(("two event types", mixed))
    out.append(("seq as text", [("1", *ok[0][1:])]))
    out.append(("timestamp as int", [(ok[0][0], ok[0][1], 5, *ok[0][3:])]))
    big = 2**63
    payload = ok[0][3]
    out.append(("seq past 64 bits", [(big, KIND, 1.0, payload, ok[0][4])]))
    out.append(("payload a bytearray", [(*ok[0][:3], bytearray(ok[0][3]), ok[0][4])]))
    out.append(("checksum a bytearray", [(*ok[0][:4], bytearray(ok[0][4]))]))
    out.append(("a short row", [ok[0][:4]]))
    out.append(("a row of six", [(*ok[0], 1)]))
    return out


@pytest.mark.parametrize("name,events", _odd_rows(), ids=lambda x: None)
def test_rows_not_taken_as_they_are_answer_as_python(
    monkeypatch: pytest.MonkeyPatch, name: str, events: Any
) -> None:
    _native()
    _both(monkeypatch, events)


def test_a_link_that_is_not_bytes_answers_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    _native()
    events = _run(_bodies(2))
    _both(monkeypatch, events, bytearray(ZERO_LINK))
    _both(monkeypatch, events, ZERO_LINK[:31])


_MUTATED = """
import gc, hashlib
import orjson
from statekeeper.codec import appends, pipeline

native = appends._APPEND_NATIVE
prefix = appends._link_prefix("chat", "save")
pointer = b"/" + b"m" * 200 + b"/-"


def rows():
    link, out = bytes(32), []
    for i in range(3):
        body = b'{"ops":[{"op":"add","path":"' + pointer + b'","value":%d}]}' % i
        payload = pipeline._SHA_JSON + link + body
        link = hashlib.sha256(prefix + pipeline._seq_ts.pack(i + 1, 1.0) + payload).digest()
        out.append((i + 1, "save", 1.0, payload, link))
    return out, link


for how in ("clear", "replace"):
    events, last = rows()  # (the list holds the only references to its rows)

    def loads(text, events=events, how=how):
        if how == "clear":
            events.clear()
        else:
            events[0] = (1, "save", 1.0, b"x" * 300, bytes(32))
        gc.collect()
        junk = [bytes([7]) * 300 for _ in range(200)]
        return orjson.loads(text)

    got = native(prefix, "save", events, bytes(32), loads)
    assert got == (pointer.decode(), [0, 1, 2], last), (how, got)
print("ok")
"""


def test_a_run_changed_while_it_is_checked_does_not_crash() -> None:
    """The rows are the ones the call was given, whatever ``loads`` (any callable; a
    finalizer run by a collection in it can run another thread) does to the list: the
    C check reads its own copy, not freed rows or past a shortened list (before: a
    segfault, list items read from a cleared list). In a child process: a crash there
    fails this test instead of the run."""
    _native()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _MUTATED], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr)


def test_statekeeper_pure_checks_runs_in_python() -> None:
    """``STATEKEEPER_PURE=1`` (read at import) leaves the C check out: every run is
    checked by the Python checks."""
    code = "from statekeeper.codec import appends as a\nprint(a._APPEND_NATIVE)\n"
    env = {**os.environ, "STATEKEEPER_PURE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["None"]
