"""One vocabulary (ARCHITECTURE.md, "Vocabulary"): the old names stay out of the code,
the renamed public names still work and warn, and stores written before the rename
load and are written byte for byte as before."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sqlite3
import tokenize
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import statekeeper
from statekeeper import StateStore, StateTransition
from statekeeper.records import Event, EventType, RawEvent

SRC = Path(statekeeper.__file__).parent
#: a store written by the code before the rename (commit bd9b62b), by ``_scenario``
#: below with the same clock, dumped with ``sqlite3.Connection.iterdump``
OLD_STORE = Path(__file__).parent / "data" / "sqlite-store-before-vocabulary.sql"

#: identifiers the rename removed: the event's type was also called its kind
OLD_IDENTIFIERS = {"EventKind", "SNAPSHOT_KIND", "create_kind", "event_kind", "_STORE_KINDS"}


def _sources() -> Iterator[Path]:
    yield from sorted(SRC.rglob("*.py"))


def test_the_old_identifiers_do_not_come_back_in_src() -> None:
    found = []
    for path in _sources():
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                # names only: the deprecated aliases name the old ones in strings
                if tok.type == tokenize.NAME and tok.string in OLD_IDENTIFIERS:
                    found.append(f"{path.relative_to(SRC)}:{tok.start[0]}: {tok.string}")
    assert found == []


#: (module, function) that take ``kind`` as the deprecated keyword of the type
_KIND_ALIASES = {
    ("raw.py", "__init__"),
    ("sealing.py", "seal"),
    ("opening.py", "open"),
    ("renamed.py", "_renamed_keywords"),
}


def test_the_store_codec_and_engines_call_an_event_type_a_type() -> None:
    """No parameter or local named ``kind``/``kinds`` where records are written and
    read (elsewhere ``kind`` names other things: a verification problem's, a backup
    frame's, a dataclass field of its own)."""
    found = []
    roots = [SRC / "store", SRC / "codec", SRC / "backends", SRC / "records"]
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            for fn in ast.walk(ast.parse(path.read_text())):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                args = fn.args
                names = [
                    (a.arg, fn.lineno) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
                ]
                if (path.name, fn.name) in _KIND_ALIASES:
                    names = [n for n in names if n[0] != "kind"]  # the deprecated keyword
                names += [
                    (node.id, node.lineno)
                    for node in ast.walk(fn)
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
                ]
                found += [
                    f"{path.relative_to(SRC)}:{line}: {name}"
                    for name, line in names
                    if name in ("kind", "kinds")
                ]
    assert found == []


def test_event_data_is_the_deprecated_name_of_info() -> None:
    event = Event("a", 1, "note", 1.0, {"tool": "search"})
    assert event.info == {"tool": "search"}
    with pytest.warns(
        DeprecationWarning, match=r"Event\.data is deprecated: use Event\.info"
    ) as caught:
        assert event.data == {"tool": "search"}  # type: ignore[deprecated]
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with pytest.warns(DeprecationWarning, match=r"Event\(data=\.\.\.\) is deprecated"):
        old = Event("a", 1, "note", 1.0, data={"tool": "x"})  # type: ignore[deprecated]
    assert old.info == {"tool": "x"}
    with pytest.warns(DeprecationWarning, match=r"Event\(data=\.\.\.\)"):
        moved = dataclasses.replace(event, data={"n": 1})  # type: ignore[call-arg]
    assert moved.info == {"n": 1} and moved.seq == 1
    assert dataclasses.replace(event, info={"n": 2}).info == {"n": 2}
    assert [f.name for f in dataclasses.fields(Event)][4] == "info"


def test_raw_event_kind_is_the_deprecated_name_of_type() -> None:
    raw = RawEvent(3, "patch", 1.5, b"p", b"c")
    assert raw.type == "patch"
    with pytest.warns(
        DeprecationWarning, match=r"RawEvent\.kind is deprecated: use RawEvent\.type"
    ):
        assert raw.kind == "patch"  # type: ignore[deprecated]
    with pytest.warns(DeprecationWarning, match=r"RawEvent\(kind=\.\.\.\) is deprecated"):
        old = RawEvent(3, kind="patch", timestamp=1.5, payload=b"p", checksum=b"c")  # type: ignore[deprecated]
    assert old == raw
    with pytest.raises(TypeError, match="payload"):
        RawEvent(3, "patch", 1.5)  # type: ignore[call-overload]


def test_the_conformance_helper_takes_its_old_keyword() -> None:
    from statekeeper.testing import event

    assert event(2, event_type="note").type == "note"
    with pytest.warns(DeprecationWarning, match=r"event\(kind=\.\.\.\) is deprecated"):
        assert event(2, kind="note") == event(2, event_type="note")


def test_the_conformance_helpers_take_ts_as_the_old_name_of_timestamp() -> None:
    from statekeeper.testing import event, request, snapshot

    assert event(2, timestamp=7.5).timestamp == 7.5
    assert event(2).timestamp == 2.0  # default: the seq
    with pytest.warns(DeprecationWarning, match=r"event\(ts=\.\.\.\) is deprecated") as caught:
        assert event(2, ts=7.5) == event(2, timestamp=7.5)
    assert caught[0].filename == __file__
    assert snapshot(3, timestamp=9.0).timestamp == 9.0
    with pytest.warns(DeprecationWarning, match=r"snapshot\(ts=\.\.\.\) is deprecated"):
        assert snapshot(3, ts=9.0) == snapshot(3, timestamp=9.0)
    stamped = request("a", 0, 2, timestamp=5.0)
    assert [e.timestamp for e in stamped.events] == [5.0, 5.0]
    with pytest.warns(DeprecationWarning, match=r"request\(ts=\.\.\.\) is deprecated"):
        assert request("a", 0, 2, ts=5.0) == stamped


def test_the_codec_takes_kind_and_ts_as_the_old_names_of_record_type_and_timestamp() -> None:
    """``Codec.seal`` and ``Codec.open`` name their arguments as the glossary does
    (``record_type``, ``timestamp``); the old keywords still work and warn."""
    from statekeeper.codec import Codec

    codec = Codec()
    sealed = codec.seal("a", 1, record_type="note", timestamp=2.5, body=b'{"x":1}')
    assert sealed == codec.seal("a", 1, "note", 2.5, b'{"x":1}')
    with pytest.warns(DeprecationWarning) as caught:
        old = codec.seal("a", 1, kind="note", ts=2.5, body=b'{"x":1}')  # type: ignore[deprecated]
    assert [str(w.message) for w in caught] == [
        "Codec.seal(kind=...) is deprecated: use Codec.seal(record_type=...)",
        "Codec.seal(ts=...) is deprecated: use Codec.seal(timestamp=...)",
    ]
    assert {w.filename for w in caught} == {__file__}  # they point at the caller's line
    assert old == sealed
    opened = codec.open("a", 1, "note", 2.5, sealed.payload, sealed.checksum)
    assert opened.body == b'{"x":1}'
    with pytest.warns(DeprecationWarning, match=r"Codec\.open\(kind=\.\.\.\) is deprecated"):
        again = codec.open(  # type: ignore[deprecated]
            "a", 1, kind="note", timestamp=2.5, payload=sealed.payload, checksum=sealed.checksum
        )
    assert again == opened
    with pytest.warns(DeprecationWarning, match=r"Codec\.open\(ts=\.\.\.\) is deprecated"):
        stamped = codec.open(  # type: ignore[deprecated]
            "a", 1, "note", ts=2.5, payload=sealed.payload, checksum=sealed.checksum
        )
    assert stamped == opened
    with pytest.raises(TypeError, match="record_type and its deprecated name kind"):
        codec.seal("a", 1, "note", 2.5, b"{}", kind="note")  # type: ignore[deprecated]
    with pytest.raises(TypeError, match="missing required arguments: \\['timestamp'\\]"):
        codec.open("a", 1, "note", payload=sealed.payload, checksum=sealed.checksum)  # type: ignore[deprecated]
    with pytest.raises(TypeError, match="'body'"):
        codec.seal("a", 1, "note", 2.5)  # type: ignore[deprecated]


def test_event_kind_is_the_deprecated_name_of_event_type() -> None:
    records = importlib.import_module("statekeeper.records")
    with pytest.warns(DeprecationWarning, match=r"statekeeper\.records\.EventKind.*EventType"):
        assert records.EventKind is EventType
    with pytest.warns(DeprecationWarning, match=r"statekeeper\.EventKind.*records\.EventType"):
        assert statekeeper.EventKind is EventType
    with pytest.warns(DeprecationWarning, match="EventType"):
        from statekeeper.records import EventKind  # noqa: F401
    assert "EventKind" not in records.__all__ and "EventType" in records.__all__
    assert "EventKind" not in dir(statekeeper)
    with pytest.raises(AttributeError):
        records.NoSuchName  # noqa: B018


def test_the_suite_turns_a_use_of_an_old_name_into_an_error() -> None:
    """pyproject's filterwarnings: a test or doc that still says ``event.data`` fails."""
    event = Event("a", 1, "note", 1.0, {})
    with pytest.raises(DeprecationWarning):
        event.data  # type: ignore[deprecated]  # noqa: B018
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert event.info == {}


async def _scenario(url: str) -> None:
    ticks = iter(range(1_700_000_000, 1_700_000_100))
    async with StateStore(url, snapshot_every=2, clock=lambda: float(next(ticks))) as store:
        agent = await store.agent("agent-1")
        agent.data["task"] = "summarise"
        await agent.transition(StateTransition.START_PROCESSING, {"tool": "search"})
        await agent.record("tool_result", {"tool": "search", "hits": 3})
        agent.data["messages"] = ["hello"]
        await agent.save({"note": "saved"})
        await store.append("agent-1", "custom", {"k": "v"})


def _restore(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(OLD_STORE.read_text())
    con.close()


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite3.connect(path)
    try:
        return {
            table: con.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("sk_agents", "sk_events", "sk_snapshots")
        }
    finally:
        con.close()


async def test_a_store_written_before_the_rename_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _restore(path)
    async with StateStore(f"sqlite:///{path}") as store:
        snap = await store.load("agent-1")
        assert (snap.seq, snap.fsm_state) == (5, "processing")
        assert snap.data == {"task": "summarise", "messages": ["hello"]}
        events = [e async for e in store.history("agent-1")]
        assert [(e.type, e.info) for e in events] == [
            (EventType.CREATED, {}),
            (
                EventType.TRANSITION,
                {
                    "event": "start_processing",
                    "from": "idle",
                    "to": "processing",
                    "metadata": {"tool": "search"},
                },
            ),
            ("tool_result", {"tool": "search", "hits": 3}),
            (EventType.PATCH, {"note": "saved"}),
            ("custom", {"k": "v"}),
        ]
        assert (await store.verify()).ok
        await store.append("agent-1", "after", {"n": 1})
    async with StateStore(f"sqlite:///{path}") as store:
        last = [e async for e in store.history("agent-1", after_seq=5)]
        assert [(e.seq, e.type, e.info) for e in last] == [(6, "after", {"n": 1})]
    con = sqlite3.connect(path)
    try:  # the stored column keeps its name
        assert con.execute("SELECT kind FROM sk_events WHERE seq = 6").fetchone() == ("after",)
    finally:
        con.close()


async def test_the_same_writes_store_the_same_bytes_as_before_the_rename(
    tmp_path: Path,
) -> None:
    old, new = tmp_path / "old.sqlite", tmp_path / "new.sqlite"
    _restore(old)
    await _scenario(f"sqlite:///{new}")
    before, after = _rows(old), _rows(new)
    assert len(after["sk_events"]) == 5 and len(after["sk_snapshots"]) == 2
    assert after == before
