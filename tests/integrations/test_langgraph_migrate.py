"""``statekeeper langgraph import`` / ``export``: real graphs run on LangGraph's own
``SqliteSaver`` / ``PostgresSaver`` (the oracle), moved into statekeeper (SQLite,
PostgreSQL and Redis stores), then compared and continued on both sides.

Each scenario checks that, right after the import, ``get_state_history`` through the
new saver is the source's (same checkpoint ids, parents, values, metadata, tasks,
interrupts), and that the graph continues exactly as it does on the source: a chat
and a ReAct agent take more turns, an interrupted review and a map-reduce of
interrupted subgraphs (``Send`` fan-out) resume, and time travel forks from old
checkpoints. Message ids given by ``add_messages`` are made deterministic per side
(as in ``test_langgraph_oracle.py``), so both sides must produce the same ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import message as lg_message
from langgraph.types import Command

from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.migrate import (
    IncompatibleTarget,
    MigrationMismatch,
    NotALangGraphDatabase,
    compare_threads,
    export_threads,
    import_threads,
)
from tests.keyfiles import write_key_file

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)
from ._lg_graphs import chat_graph as counting_chat
from ._lg_graphs import map_reduce_graph, review_graph
from .test_langgraph_oracle import PAD, _normal, chat_builder, react_builder

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
TARGETS = ["sqlite", "postgresql", "redis"]
#: the tests that run a second (or killed) process: SQLite in the default run, the
#: server engines with the slow tests (CI runs both: -m "slow or not slow")
NEW_PROCESS_TARGETS = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.slow),
    pytest.param("redis", marks=pytest.mark.slow),
]


# -- deterministic message ids ---------------------------------------------------------


class _Ids:
    """``uuid4`` for ``add_messages`` from one counter per side; ``sync`` starts the
    "ours" side where the oracle is (what both sides have stored is the same)."""

    def __init__(self) -> None:
        self.next = {"oracle": 1, "ours": 1}
        self.side = "oracle"

    def uuid4(self) -> uuid.UUID:
        n = self.next[self.side]
        self.next[self.side] = n + 1
        return uuid.UUID(int=n)

    def sync(self) -> None:
        self.next["ours"] = self.next["oracle"]


@pytest.fixture
def ids(monkeypatch: pytest.MonkeyPatch) -> _Ids:
    fake = _Ids()
    monkeypatch.setattr(lg_message, "uuid", types.SimpleNamespace(uuid4=fake.uuid4))
    return fake


# -- stores ------------------------------------------------------------------------------


def _init(url: str) -> str:
    """An empty statekeeper store at ``url``, made by ``statekeeper init``."""
    done = _run("init", url)
    assert done.returncode == 0, done.stderr
    return url


@contextlib.contextmanager
def _target(engine: str, tmp_path: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield _init(f"sqlite:///{tmp_path / 'sk.db'}")
    elif engine == "postgresql":
        require_postgres()
        schema = namespace(tmp_path, "sk_lgm_")
        try:
            yield _init(f"{POSTGRES_DSN}?schema={schema}")
        finally:
            drop_schema(schema)
    else:
        require_redis()
        prefix = namespace(tmp_path, "sk_lgm_") + ":"
        try:
            yield _init(f"{REDIS_URL}?prefix={prefix}")
        finally:
            delete_prefix(prefix)


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with _target(request.param, tmp_path) as url:
        yield url


@contextlib.contextmanager
def _pg_peer(tmp_path: Path, tag: str) -> Iterator[str]:
    """A PostgreSQL schema for LangGraph's PostgresSaver tables (dropped afterwards)."""
    require_postgres()
    schema = namespace(tmp_path, f"lg_{tag}_")
    try:
        yield f"{POSTGRES_DSN}?schema={schema}"
    finally:
        drop_schema(schema)


@contextlib.contextmanager
def _lg_saver(url: str) -> Iterator[Any]:
    """LangGraph's own saver on a SQLite path or a PostgreSQL URL (set up)."""
    if url.startswith("postgresql://"):
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        from statekeeper.integrations.langgraph.peers import _pg_conninfo

        conninfo, schema = _pg_conninfo(url)
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        with psycopg.Connection.connect(
            conninfo,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={schema}",
        ) as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            yield saver
        return
    conn = sqlite3.connect(url, check_same_thread=False)  # type: ignore[assignment]
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


# -- comparing ---------------------------------------------------------------------------


def _snap(s: Any) -> Any:
    """Everything a state snapshot shows (ids included: right after an import they are
    the source's)."""
    return (
        s.values,
        s.next,
        s.config,
        s.parent_config,
        s.metadata,
        s.created_at,
        [(t.id, t.name, t.path, t.error, t.interrupts, t.result) for t in s.tasks],
        s.interrupts,
    )


def _histories(graph: Any, config: Any) -> list[Any]:
    return [_snap(s) for s in graph.get_state_history(config)]


def _subgraph_histories(graph: Any, config: Any) -> list[Any]:
    """The histories of every subgraph the state has pending (their namespaces)."""
    state = graph.get_state(config, subgraphs=True)
    return [
        _histories(graph, t.state) if isinstance(t.state, dict) else _snap(t.state)
        for t in state.tasks
        if t.state is not None
    ]


class Move:
    """A graph run on LangGraph's saver (the source, also the oracle) and, after the
    import, on a ``StatekeeperSaver`` over the target."""

    def __init__(self, build: Callable[[Any], Any], source: str, target: str, ids: _Ids) -> None:
        self.build, self.source, self.target, self.ids = build, source, target, ids
        self._src = contextlib.ExitStack()
        self.oracle = self.build(self._src.enter_context(_lg_saver(source)))
        self.saver: StatekeeperSaver | None = None
        self.ours: Any = None

    def run_source(self, value: Any, config: Any) -> Any:
        self.ids.side = "oracle"
        return self.oracle.invoke(value, config)

    def move(self, threads: list[str]) -> None:
        report = import_threads(self.source, self.target)
        assert report.threads_verified == report.threads >= len(threads)
        assert report.checkpoints_copied == report.checkpoints > 0
        self.saver = StatekeeperSaver.from_url(self.target)
        self.ours = self.build(self.saver)
        for thread in threads:  # the same history, ids and all, through the graph API
            config = {"configurable": {"thread_id": thread}}
            assert _histories(self.ours, config) == _histories(self.oracle, config)
        self.ids.sync()

    def both(self, value: Any, config: Any, ours_config: Any = None) -> Any:
        """Run a step on both sides; the results and the histories must agree."""
        self.ids.side = "oracle"
        want = self.oracle.invoke(_copy(value), config)
        self.ids.side = "ours"
        got = self.ours.invoke(_copy(value), ours_config or config)
        assert got == want
        base = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
        assert _normal(list(self.ours.get_state_history(base))) == _normal(
            list(self.oracle.get_state_history(base))
        )
        return got

    def close(self) -> None:
        if self.saver is not None:
            self.saver.close()
        self._src.close()


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


@pytest.fixture
def source_db(tmp_path: Path) -> str:
    return str(tmp_path / "langgraph.sqlite")


def _thread(name: str) -> tuple[str, dict[str, Any]]:
    thread = f"{name}-{uuid.uuid4().hex[:8]}"
    return thread, {"configurable": {"thread_id": thread}}


# -- scenarios on every target -----------------------------------------------------------


def test_messages_chat_moves_and_continues(target: str, source_db: str, ids: _Ids) -> None:
    move = Move(lambda s: chat_builder().compile(checkpointer=s), source_db, target, ids)
    try:
        threads = [_thread("chat") for _ in range(3)]
        for turn in range(4):
            for _, config in threads:
                move.run_source({"messages": [HumanMessage(f"q{turn} {PAD}")]}, config)
        move.move([t for t, _ in threads])
        for turn in range(4, 6):
            for _, config in threads:
                move.both({"messages": [HumanMessage(f"q{turn} {PAD}")]}, config)
        state = move.ours.get_state(threads[0][1])
        assert len(state.values["messages"]) == 12
        assert all(isinstance(m, BaseMessage) and m.id for m in state.values["messages"])
    finally:
        move.close()


def test_react_agent_with_tools_moves_and_continues(target: str, source_db: str, ids: _Ids) -> None:
    move = Move(react_builder, source_db, target, ids)
    try:
        thread, config = _thread("react")
        for turn in range(3):
            move.run_source({"messages": [HumanMessage(f"look up {turn} {PAD}")]}, config)
        move.move([thread])
        history = list(move.ours.get_state_history(config))
        tools = [m for s in history[:1] for m in s.values["messages"] if m.type == "tool"]
        assert len(tools) == 3  # the tool results came over
        move.both({"messages": [HumanMessage(f"look up more {PAD}")]}, config)
    finally:
        move.close()


def test_map_reduce_with_interrupted_subgraphs_resumes_after_the_move(
    target: str, source_db: str, ids: _Ids
) -> None:
    move = Move(lambda s: map_reduce_graph().compile(checkpointer=s), source_db, target, ids)
    try:
        thread, config = _thread("mr")
        move.run_source({"topics": ["ducks", "geese", "swans"]}, config)
        pending = move.oracle.get_state(config)
        assert len(pending.interrupts) == 3  # one per Send
        move.move([thread])
        assert _subgraph_histories(move.ours, config) == _subgraph_histories(move.oracle, config)
        namespaces = {ns for _, ns in _index(move.saver, thread)}
        assert len(namespaces) == 4  # the graph's and one per subgraph run
        answer = {i.id: f"ok {i.value['approve']}" for i in pending.interrupts}
        done = move.both(Command(resume=answer), config)
        assert done["summary"].count("ok ") == 3
    finally:
        move.close()


def test_time_travel_history_moves_and_forks_again(target: str, source_db: str, ids: _Ids) -> None:
    move = Move(lambda s: counting_chat(3).compile(checkpointer=s), source_db, target, ids)
    try:
        thread, config = _thread("tt")
        move.run_source({"messages": [HumanMessage("hi", id="h0")]}, config)
        history = list(move.oracle.get_state_history(config))
        early = history[-3].config  # after the first chat step
        # a fork the user asked for: edit an old state, then run on from it
        forked = move.oracle.update_state(early, {"notes": ["edited"]})
        move.run_source(None, forked)
        move.run_source(None, history[-2].config)  # replay from an older checkpoint
        move.move([thread])
        # travel again, from the same old checkpoint, on both sides
        again = list(move.oracle.get_state_history(config))[-4].config
        move.both(None, again)
        edit = move.oracle.update_state(again, {"notes": ["again"]})
        move.ids.side = "ours"
        ours_edit = move.ours.update_state(again, {"notes": ["again"]})
        assert edit["configurable"]["checkpoint_id"] != ours_edit["configurable"]["checkpoint_id"]
        move.both(None, edit, ours_edit)
    finally:
        move.close()


def _index(saver: StatekeeperSaver | None, thread: str) -> list[tuple[str, str]]:
    assert saver is not None
    return [
        (t.checkpoint["id"], t.config["configurable"]["checkpoint_ns"])
        for t in saver.list({"configurable": {"thread_id": thread}})
    ]


# -- a PostgresSaver source --------------------------------------------------------------


def test_postgres_saver_source(tmp_path: Path, ids: _Ids) -> None:
    with _pg_peer(tmp_path, "src") as source, _target("sqlite", tmp_path) as target:
        move = Move(lambda s: map_reduce_graph().compile(checkpointer=s), source, target, ids)
        try:
            thread, config = _thread("pg")
            move.run_source({"topics": ["a", "b"]}, config)
            pending = move.oracle.get_state(config)
            move.move([thread])
            answer = {i.id: f"yes {i.value['approve']}" for i in pending.interrupts}
            move.both(Command(resume=answer), config)
        finally:
            move.close()


# -- interrupt before the import, resume in another process after it ---------------------

_CHILD = """
import sys, sqlite3
sys.path.insert(0, {src!r}); sys.path.insert(0, {here!r})
from _lg_graphs import review_graph
from langgraph.types import Command
cfg = {{"configurable": {{"thread_id": {thread!r}}}}}
if sys.argv[1] == "start":
    from langgraph.checkpoint.sqlite import SqliteSaver
    conn = sqlite3.connect(sys.argv[2], check_same_thread=False)
    out = review_graph(sys.argv[3]).compile(checkpointer=SqliteSaver(conn)).invoke(
        {{"messages": []}}, cfg)
    print(out["__interrupt__"][0].value["question"])
else:
    from statekeeper.integrations.langgraph import StatekeeperSaver
    with StatekeeperSaver.from_url(sys.argv[2]) as saver:
        out = review_graph(sys.argv[3]).compile(checkpointer=saver).invoke(
            Command(resume="approved"), cfg)
    print(out["approved"], out["notes"])
"""


def _py(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS`` in this process (typer's runner: stdout and stderr apart);
    :func:`_cli` runs it as a user does, in a subprocess."""
    from typer.testing import CliRunner

    from statekeeper.cli import app

    env = {k: None for k in os.environ if k.startswith("STATEKEEPER_")}
    runner = CliRunner(env={**env, "COLUMNS": "200", "NO_COLOR": "1"})
    result = runner.invoke(app, list(args))
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, "COLUMNS": "200", "NO_COLOR": "1", **env},
    )


@pytest.mark.parametrize("engine", NEW_PROCESS_TARGETS)
def test_interrupted_before_the_import_resumes_in_a_new_process(
    engine: str, tmp_path: Path
) -> None:
    source = str(tmp_path / "lg.sqlite")
    thread = f"review-{uuid.uuid4().hex[:8]}"
    child = _CHILD.format(src=str(SRC), here=str(HERE), thread=thread)
    log = tmp_path / "nodes.log"
    started = _py(child, "start", source, str(log))
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "approve?"
    assert log.read_text().split() == ["draft", "review"]
    oracle_copy = tmp_path / "oracle.sqlite"
    shutil.copy(source, oracle_copy)
    with _target(engine, tmp_path) as target:
        # (the import in this process: the graph's two runs are the new processes)
        moved = _run("langgraph", "import", source, target)
        assert moved.returncode == 0, moved.stderr
        assert "verified: 1 thread(s)" in moved.stdout
        resumed = _py(child, "resume", target, str(log))
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.split()[0] == "approved"
        # draft did not run again; review ran again to take the answer, then publish
        assert log.read_text().split() == ["draft", "review", "review", "publish"]
        with StatekeeperSaver.from_url(target) as saver:
            ours = review_graph().compile(checkpointer=saver)
            with sqlite3.connect(oracle_copy, check_same_thread=False) as conn:
                oracle = review_graph().compile(checkpointer=SqliteSaver(conn))
                oracle.invoke(Command(resume="approved"), {"configurable": {"thread_id": thread}})
                config = {"configurable": {"thread_id": thread}}
                assert _normal(list(ours.get_state_history(config))) == _normal(
                    list(oracle.get_state_history(config))
                )


# -- the command: dry run, resume after a kill, round trips, refusals --------------------


def _populate(source: str, threads: int = 6, turns: int = 3) -> list[str]:
    names = []
    with _lg_saver(source) as saver:
        graph = counting_chat(turns).compile(checkpointer=saver)
        review = review_graph().compile(checkpointer=saver)
        for i in range(threads):
            thread = f"t{i:02d}"
            names.append(thread)
            (review if i % 3 == 2 else graph).invoke(
                {"messages": [HumanMessage(f"hello {i}", id=f"h{i}")]},
                {"configurable": {"thread_id": thread}},
            )
    return names


def _digest(path: str) -> bytes:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).digest()


def test_dry_run_counts_and_writes_nothing(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    _populate(source)
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    before = _digest(source)
    out = _run("langgraph", "import", source, target, "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    with sqlite3.connect(source) as conn:
        (cps,) = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        (ws,) = conn.execute("SELECT count(*) FROM writes").fetchone()
    assert (report["threads"], report["checkpoints"], report["writes"]) == (6, cps, ws)
    assert report["checkpoints_copied"] == 0 and report["dry_run"] is True
    with StatekeeperSaver.from_url(target) as saver:
        assert list(saver.list(None)) == []
    text = _run("langgraph", "import", source, target, "--dry-run")
    assert f"would copy {cps} of {cps} checkpoint(s) in 6 thread(s)" in text.stdout
    assert _digest(source) == before


_KILLED_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
from statekeeper.integrations.langgraph import saver as mod
from statekeeper.cli import main
real = mod.StatekeeperSaver.put
count = [0]
def put(self, *args, **kwargs):
    count[0] += 1
    if count[0] > {stop}:  # the next checkpoint's writes are stored, it is not
        Path({marker!r}).touch()
        while True:
            time.sleep(0.05)
    return real(self, *args, **kwargs)
mod.StatekeeperSaver.put = put
main(["langgraph", "import", {source!r}, {target!r}])
"""


@pytest.mark.parametrize("engine", NEW_PROCESS_TARGETS)
def test_a_killed_import_resumes_where_it_stopped(engine: str, tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    threads = _populate(source)
    marker = tmp_path / "blocked"
    with _target(engine, tmp_path) as target:
        code = _KILLED_CHILD.format(
            src=str(SRC), stop=13, marker=str(marker), source=source, target=target
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            deadline = time.monotonic() + 120
            while not marker.exists():  # wait for the condition, not for a duration
                assert child.poll() is None, "the import ended before it was stopped"
                assert time.monotonic() < deadline
                time.sleep(0.02)
            # the copy writes behind: wait until its buffer reached the store
            with StatekeeperSaver.from_url(target) as watcher:
                while len(list(watcher.list(None))) < 13:
                    assert child.poll() is None
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        with StatekeeperSaver.from_url(target) as saver:
            assert len(list(saver.list(None))) == 13  # interrupted mid-way
        # resumed in this process (the killed one was the real process; the command as a
        # user runs it, in a subprocess: test_progress_advances_once_per_checkpoint)
        resumed = _run("langgraph", "import", source, target, "--json")
        assert resumed.returncode == 0, resumed.stderr
        report = json.loads(resumed.stdout)
        assert report["checkpoints_present"] == 13
        assert report["checkpoints_copied"] == report["checkpoints"] - 13
        assert report["threads_verified"] == len(threads)
        again = json.loads(_run("langgraph", "import", source, target, "--json").stdout)
        assert again["checkpoints_copied"] == 0 and again["writes_copied"] == 0


def test_import_export_round_trip_sqlite_and_postgres(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    threads = _populate(source)
    with _target("sqlite", tmp_path) as target, _pg_peer(tmp_path, "out") as pg_out:
        assert _run("langgraph", "import", source, target).returncode == 0
        back = str(tmp_path / "back.sqlite")
        for out_url in (back, f"sqlite:///{tmp_path / 'back2.sqlite'}", pg_out):
            done = _run("langgraph", "export", target, out_url, "--json")
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert report["threads_verified"] == len(threads)
        # the round trip is the source, through LangGraph's own savers on both ends
        with _lg_saver(source) as a, _lg_saver(back) as b, _lg_saver(pg_out) as c:
            for thread in threads:
                compare_threads(a, b, thread)
                compare_threads(a, c, thread)
        # and a PostgresSaver database imports back into a fresh store
        with _target("redis", tmp_path) as again:
            report = import_threads(pg_out, again)
            assert report.threads_verified == len(threads)


def test_export_of_a_subgraph_thread_resumes_on_sqlite_saver(tmp_path: Path, ids: _Ids) -> None:
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    _, config = _thread("mr")
    with StatekeeperSaver.from_url(target) as saver:
        graph = map_reduce_graph().compile(checkpointer=saver)
        graph.invoke({"topics": ["x", "y"]}, config)
        pending = graph.get_state(config).interrupts
    out = str(tmp_path / "out.sqlite")
    report = export_threads(target, out)
    assert report.threads_verified == 1 and report.namespaces == 3
    with _lg_saver(out) as lg:
        done = (
            map_reduce_graph()
            .compile(checkpointer=lg)
            .invoke(Command(resume={i.id: "fine" for i in pending}), config)
        )
    assert done["summary"] == "facts on x | facts on y | x: fine | y: fine"


def _key_file(path: Path) -> Path:
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}})
    path.chmod(0o600)
    return path


def _one_checkpoint(saver: StatekeeperSaver, thread: str, cid: str) -> None:
    saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        {
            "v": 4,
            "id": cid,
            "ts": "2024-05-04T06:32:42.235444+00:00",
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
            "updated_channels": [],
        },
        {},
        {},
    )


def test_encrypted_target_needs_its_key(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=2)
    key_file = _key_file(tmp_path / "keys.json")
    keyring = Keyring.from_file(key_file)
    target = f"sqlite:///{tmp_path / 'enc.db'}"
    with StatekeeperSaver.from_url(target, keyring=keyring) as saver:  # an encrypted store
        _one_checkpoint(saver, "other", "1ef4f797-8335-6428-8001-8a1503f9b875")
    # without the key nothing is written (it would be plaintext in an encrypted store)
    # in this process: test_interrupted_before_the_import_resumes_in_a_new_process runs
    # the command as a user does
    refused = _run("langgraph", "import", source, target)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "it is encrypted (records under key 'k1')" in refused.stderr
    wrong = _key_file(tmp_path / "wrong.json")  # the same key id, other key material
    bad = _run("langgraph", "import", source, target, "--key-file", str(wrong))
    assert bad.returncode == 2 and bad.stderr.startswith("error:"), bad.stderr
    assert "wrong key" in bad.stderr
    plain = _init(f"sqlite:///{tmp_path / 'plain.db'}")
    with StatekeeperSaver.from_url(plain) as saver:
        _one_checkpoint(saver, "other", "1ef4f797-8335-6428-8001-8a1503f9b875")
    mixed = _run("langgraph", "import", source, plain, "--key-file", str(key_file))
    assert mixed.returncode == 2 and "it is not encrypted" in mixed.stderr
    for url, keys in ((target, keyring), (plain, None)):
        with StatekeeperSaver.from_url(url, keyring=keys) as saver:
            threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
            assert threads == {"other"}  # nothing was written
    ok = _run("langgraph", "import", source, target, "--key-file", str(key_file), "-t", "t01")
    assert ok.returncode == 0, ok.stderr
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("enc.db*"))
    assert b"hello 1" not in raw  # written encrypted
    with StatekeeperSaver.from_url(target, keyring=keyring) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "t01"}}) is not None
        _one_checkpoint(saver, "t00", "0000")  # a thread the source has, but not this
    other = _run("langgraph", "import", source, target, "--key-file", str(key_file))
    assert other.returncode == 2
    assert "t00" in other.stderr and "not a copy of this source" in other.stderr


def test_refusals_are_one_line_and_change_nothing(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=1)
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    other_app = tmp_path / "app.db"
    with sqlite3.connect(other_app) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    cases = [
        (("import", str(tmp_path / "missing.sqlite"), target), "no such file"),
        (("import", str(other_app), target), "no 'checkpoints' table"),
        (("import", target, target), "same database"),
        (("import", str(tmp_path / "sk.db"), f"sqlite:///{source}"), "statekeeper store"),
        (("import", source, f"sqlite:///{tmp_path / 'nowhere.db'}"), "statekeeper init"),
        (("import", source, f"sqlite:///{other_app}"), "not a statekeeper store"),
        (("export", target, f"sqlite:///{other_app}"), "no 'checkpoints' table"),
        (("export", target, "redis://localhost"), "LangGraph's savers keep threads"),
        (("export", f"sqlite:///{other_app}", str(tmp_path / "x.sqlite")), "not a statekeeper"),
        # was "LangGraph saver database error: OperationalError: unable to open database
        # file (the copy is resumable: run it again)", naming no path
        (("export", target, str(tmp_path / "nodir" / "x.sqlite")), "no such folder:"),
    ]
    secret = "postgresql://lg:s3cretPW@127.0.0.1:1/lg"  # nothing listens on port 1
    cases += [
        (("import", secret, target), "cannot connect"),
        (("export", target, secret), "cannot connect"),
    ]
    before = {p: _digest(str(p)) for p in (Path(source), other_app)}
    for args, message in cases:
        out = _run("langgraph", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("error:") and len(out.stderr.splitlines()) == 1, out.stderr
        assert message in out.stderr, (args, out.stderr)
        assert "s3cretPW" not in out.stderr
    assert {p: _digest(str(p)) for p in before} == before
    assert not (tmp_path / "nowhere.db").exists() and not (tmp_path / "x.sqlite").exists()


def test_library_errors_are_typed(tmp_path: Path) -> None:
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    with pytest.raises(NotALangGraphDatabase):
        import_threads(str(tmp_path / "missing.sqlite"), target)
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=1)
    with StatekeeperSaver.from_url(target) as saver:
        _one_checkpoint(saver, "t00", "0000")
    with pytest.raises(IncompatibleTarget):
        import_threads(source, target)


def test_a_copy_that_differs_is_reported(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    (thread,) = _populate(source, threads=1)
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    import_threads(source, target)
    with sqlite3.connect(source) as conn:  # the source changes after the copy
        conn.execute(
            "UPDATE checkpoints SET metadata = ? WHERE checkpoint_id = "
            "(SELECT max(checkpoint_id) FROM checkpoints)",
            (json.dumps({"source": "loop", "step": 99}).encode(),),
        )
    with pytest.raises(MigrationMismatch, match="metadata"):
        import_threads(source, target)
    out = _run("langgraph", "import", source, target)
    assert out.returncode == 2 and "differs from the source" in out.stderr
    assert thread in out.stderr


def test_running_again_copies_what_the_source_stored_since(tmp_path: Path) -> None:
    """What docs/langgraph.md says: a second run copies only what is missing, also new
    pending writes on a checkpoint copied before."""
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=3)  # t02 is a review waiting at its interrupt
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    first = import_threads(source, target)
    config = {"configurable": {"thread_id": "t02"}}
    with _lg_saver(source) as saver:  # the old application goes on
        graph = review_graph().compile(checkpointer=saver)
        head = graph.get_state(config).config
        # a write lands on the checkpoint already copied (as a parallel task's would)
        saver.put_writes(head, [("notes", ["late"])], "late-task")
        graph.invoke(Command(resume="later"), config)
    second = import_threads(source, target)
    assert second.checkpoints_present == first.checkpoints
    assert second.checkpoints_copied == second.checkpoints - first.checkpoints > 0
    assert second.threads_verified == 3
    with StatekeeperSaver.from_url(target) as saver:
        state = review_graph().compile(checkpointer=saver).get_state(config)
        assert state.values["approved"] == "later"


def test_progress_advances_once_per_checkpoint(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=2)
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    seen: list[tuple[str, int]] = []

    def progress(total: int) -> Callable[[int], None]:
        seen.append(("total", total))
        return lambda n: seen.append(("tick", n))

    report = import_threads(source, target, progress=progress)
    assert seen[0] == ("total", report.checkpoints)
    assert sum(n for kind, n in seen[1:] if kind == "tick") == report.checkpoints
    # and the CLI draws a bar on a terminal (rich's FORCE_COLOR stands in for one)
    out = _cli("langgraph", "import", source, target, FORCE_COLOR="1", TTY_INTERACTIVE="1")
    assert out.returncode == 0, out.stderr


def test_a_missing_peer_package_is_named_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LangGraph's PostgresSaver is optional: without its package, importing from a
    PostgresSaver database says which package to install (it used to crash with
    ModuleNotFoundError reported as an internal error)."""
    from statekeeper.errors import ConfigurationError
    from statekeeper.integrations.langgraph.peers import open_peer

    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.postgres", None)
    with pytest.raises(ConfigurationError, match="pip install langgraph-checkpoint-postgres"):
        open_peer(f"{POSTGRES_DSN}?schema=sk_never_created", readonly=True)


def test_an_encrypted_target_whose_first_agent_is_forgotten_takes_the_import(
    tmp_path: Path,
) -> None:
    """The key check reads a stored agent; a forgotten one (crypto-shredded: no key
    opens it) says nothing about the key given, so the next one is read. (Before: the
    import was refused with "agent ... was forgotten" and nothing could be imported.)"""
    import asyncio

    from statekeeper import StateStore
    from statekeeper.errors import StatekeeperError
    from statekeeper.governance.shredding import forget

    source = str(tmp_path / "lg.sqlite")
    _populate(source, threads=1)
    key_file = tmp_path / "keys.json"
    write_key_file(
        key_file, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"}
    )
    keyring = Keyring.from_file(key_file)
    target = f"sqlite:///{tmp_path / 'enc.db'}"

    async def shred() -> None:
        async with StateStore(target, keyring=keyring) as store:
            await store.save("a/first", {"email": "a@example.com"})  # listed before lg/
            await store.save("z/last", {"email": "z@example.com"})
            await forget(store, "a/first")

    asyncio.run(shred())
    report = import_threads(source, target, keyring=keyring)
    assert report.threads == 1
    wrong = Keyring({"k1": generate_key()}, data_keys=tmp_path / "vault.db")
    with pytest.raises(Exception, match=r"wrong key") as refused:
        import_threads(source, target, keyring=wrong)
    assert isinstance(refused.value, StatekeeperError), refused.value
