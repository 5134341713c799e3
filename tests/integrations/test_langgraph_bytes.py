"""Bytes a checkpoint costs on disk (issue 12: the 30-step small graph), and streams
written in the format before the codec's built-in dictionary (plain zstd records) read
and continued by today's saver, equal to LangGraph's ``InMemorySaver`` throughout."""

from __future__ import annotations

import itertools
import random
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypedDict

import langgraph.checkpoint.base.id as lg_ids
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from statekeeper.codec import Codec
from statekeeper.integrations.langgraph import StatekeeperSaver

from .test_langgraph_oracle import _normal

STEPS = 30


class Counter(TypedDict):
    n: int


def small_graph(steps: int = STEPS) -> StateGraph[Any]:
    """The benchmark's small graph (``benchmarks/bench_langgraph_goals.py``)."""

    def step(state: Counter) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    def route(state: Counter) -> str:
        return "step" if state["n"] < steps else END

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route)
    return builder


def _run(saver: Any, threads: range, steps: int = STEPS) -> None:
    graph = small_graph(steps).compile(checkpointer=saver)
    for t in threads:
        cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 4 * steps}
        graph.invoke({"n": 0}, cfg, durability="sync")


def _file_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _pin_checkpoint_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """LangGraph's checkpoint ids (uuid6) from a clock moving 2 ms an id and seeded
    random bits, instead of the wall clock and ``random``.

    An id is 60 bits of time and 48 random bits, and each checkpoint's record holds
    its id and its parent's: how well zstd compresses them depends on the digits the
    clock gave them. Measured with a fake ``time.time_ns`` moving by a fixed step a
    call and ``random`` seeded, the payload per checkpoint was 259.4 bytes at 100 ns
    a call, 257.5 at 1 ms, 253.6 at 4 ms, 250.4 at 30 ms, 251.1 at 1 s (the digits,
    not the gap: not monotonic), and 255.8-257.6 on the real clock: the test measured
    the machine's speed as much as the layout (260.23 once, on a loaded machine).
    Pinned, it measures 250.3-250.9 (12 runs, 6 beside two CPU-bound processes; the
    rest of the spread is the checkpoints' ISO timestamps and the run's token)."""
    ticks = itertools.count()
    start = 1_796_205_600_000_000_000  # 2026-12-02 10:00 UTC, in ns
    monkeypatch.setattr(
        lg_ids, "time", SimpleNamespace(time_ns=lambda: start + next(ticks) * 2_000_000)
    )
    monkeypatch.setattr(lg_ids, "random", random.Random(2026))
    monkeypatch.setattr(lg_ids, "_last_v6_timestamp", None)


def test_a_small_graph_checkpoint_stores_at_most_260_payload_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 threads x 30 steps (640 checkpoints): the events' payloads (record header,
    chain link and the compressed JSON Patch) average <= 260 bytes a checkpoint (243
    measured; main before the dictionary: 484), and the file is at most 1/2.1 of
    SqliteSaver's (was 1/1.46; the floor of this layout: docs/benchmarks.md, "bytes12").

    A step's writes share its checkpoint's event when they wait for it (``writes_wait``);
    the default 5 ms can run out on a loaded machine, which stores more events: the
    wait here is long enough that only the checkpoint ends it (the sizes measured are
    the layout's, not the machine's load); so are the checkpoint ids, whose clock
    digits change the compressed size by up to 9 bytes (``_pin_checkpoint_ids``)."""
    _pin_checkpoint_ids(monkeypatch)
    ours_path, peer_path = tmp_path / "sk.db", tmp_path / "peer.db"
    with StatekeeperSaver.from_url(f"sqlite:///{ours_path}", writes_wait=30.0) as saver:
        _run(saver, range(20))
    conn = sqlite3.connect(peer_path, check_same_thread=False)
    try:
        peer = SqliteSaver(conn)
        peer.setup()
        _run(peer, range(20))
    finally:
        conn.close()
    conn = sqlite3.connect(ours_path)
    try:
        (checkpoints,) = conn.execute("SELECT count(*) FROM sk_idempotency").fetchone()
        (payload,) = conn.execute("SELECT sum(length(payload)) FROM sk_events").fetchone()
        (longest_key,) = conn.execute("SELECT max(length(key)) FROM sk_idempotency").fetchone()
    finally:
        conn.close()
    assert checkpoints == 20 * (STEPS + 2)
    assert payload / checkpoints <= 260, payload / checkpoints
    assert longest_key == 17  # "k" + 96 bits in base64url (was "lg.cp." + 32 hex)
    ours, theirs = _file_bytes(ours_path), _file_bytes(peer_path)
    assert ours * 2.1 <= theirs, (ours, theirs)


def _compressions(path: Path) -> set[int]:
    """The compression bits of every event record's flags byte (see codec.pipeline)."""
    conn = sqlite3.connect(path)
    try:
        return {row[0][1] & 0x0C for row in conn.execute("SELECT payload FROM sk_events")}
    finally:
        conn.close()


def _history(saver: Any, thread: str) -> list[Any]:
    graph = small_graph(6).compile(checkpointer=saver)
    return _normal(list(graph.get_state_history({"configurable": {"thread_id": thread}})))


def test_a_stream_of_plain_zstd_records_reads_and_continues(tmp_path: Path) -> None:
    """Threads written with the codec ``from_url`` used before the dictionary (plain
    zstd over 512 bytes) read, and grow, through today's default saver: every history
    equal to InMemorySaver's running the same invocations; new records use the
    dictionary, old ones stay as they were."""
    url = f"sqlite:///{tmp_path}/old.db"
    oracle = InMemorySaver()
    old_codec = Codec(compression="zstd", compress_min_bytes=512)
    with StatekeeperSaver.from_url(url, codec=old_codec) as old:
        _run(old, range(3), steps=6)
    _run(oracle, range(3), steps=6)
    assert _compressions(tmp_path / "old.db") == {
        0,
        4,
    }  # plain and zstd records, none with the dictionary
    with StatekeeperSaver.from_url(url) as saver:
        for t in range(3):
            assert _history(saver, f"small-{t}") == _history(oracle, f"small-{t}")
        # the same threads run again (a new invocation on each), and a new thread
        _run(saver, range(4), steps=6)
        _run(oracle, range(4), steps=6)
        for t in range(4):
            assert _history(saver, f"small-{t}") == _history(oracle, f"small-{t}")
    with StatekeeperSaver.from_url(url, codec=old_codec) as reopened:  # and back
        for t in range(4):
            assert _history(reopened, f"small-{t}") == _history(oracle, f"small-{t}")
    assert _compressions(tmp_path / "old.db") == {0, 4, 8}
