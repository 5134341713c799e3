"""docs/cli.md (and the transcripts of docs/langgraph.md) are executed: every transcript
in them is the CLI's own output, at 80 columns.

A transcript is a block between markers::

    <!-- transcript: agents --db store.db -->
    ```console
    $ statekeeper agents --db store.db
    ...
    ```
    <!-- /transcript -->

The test runs each command through the console script's entry point in its own process
(the demo, which kills and recovers processes, in a real one; ``test_cli_trust.py`` runs
every command in a subprocess), in document order, in one scratch directory per document
holding the stores below and a LangGraph ``SqliteSaver`` file ``langgraph.sqlite``,
``COLUMNS=80``, ``TZ=UTC``, no colour), and rebuilds the block from its output (stdout,
then stderr; the exit code when it is not 0). Options after ``;`` in the marker: ``exit
N`` (the expected exit code), ``loose`` (for output with pids, timings and timestamps:
compared with every number masked and whitespace collapsed), ``shape`` (for the demo,
where a race decides which process ran the call in flight: only its headings, checks and
verdict lines are compared, numbers masked; every line must still fit 80 columns).
``bench`` runs with its timer pinned (every measured operation takes 0.2 ms): its verdict
column compares the measured latency with the seed's claims, and on a loaded machine
In-Memory's p50 passes the claimed 1 ms ("slower", not "within"), which no mask hides.

Run with ``STATEKEEPER_UPDATE_DOCS=1`` to rewrite the blocks from the fresh output.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shlex
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from rich.cells import cell_len

from statekeeper.cli import app
from statekeeper.cli._help import load_all

from ._proc import populate, sk, sk_in_process

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS_DIR / "cli.md"
#: documents whose transcripts are checked (cli.md must have some; the others may not)
TRANSCRIBED = ["cli.md", "langgraph.md"]
BLOCK = re.compile(
    r"<!-- transcript: (?P<spec>.*?) -->\n(?P<body>.*?)<!-- /transcript -->", re.DOTALL
)
#: a fixed folder for the demo, whose output shows the absolute path of its file
DEMO_DIR = Path("/tmp/statekeeper-docs")


#: 2026-12-01 00:00 UTC: when the docs' stores were written
BASE = 1_796_083_200.0


def _scratch(tmp: Path) -> None:
    """The stores the transcripts use."""
    for name in ("store.db", "scratch.db", "damaged.db"):
        populate(f"sqlite:///{tmp / name}", base=BASE)
    with sqlite3.connect(tmp / "damaged.db") as conn:  # flip bytes of alpha's seq 2
        conn.execute(
            "UPDATE sk_events SET payload = CAST(replace(CAST(payload AS TEXT), "
            "'processing', 'procesXing') AS BLOB) WHERE agent_id = 'alpha' AND seq = 2"
        )
    _langgraph_source(tmp / "langgraph.sqlite")
    _stuck_intents(tmp / "intents.db")
    # the tenants of the `--namespace` section
    from statekeeper import SyncStateStore

    with SyncStateStore(f"sqlite:///{tmp / 'tenants.db'}", clock=lambda: BASE) as tenants:
        for agent_id in ["acme/t-1", "acme/eu/t-2", "globex/g-1"]:
            tenants.save(agent_id, {"ticket": agent_id.rsplit("/", 1)[-1]})
    # the access policy of the `audit` section (docs/governance.md explains the format)
    (tmp / "policy.toml").write_text(
        '[principals.viewer]\nread = [""]\n\n[principals.ops]\nadmin = ["**"]\n'
    )


def _stuck_intents(path: Path) -> None:
    """A store holding two feed intents no delete settles, written at BASE: one of an
    earlier version (no owner) whose agent is intact, one of another host whose agent
    it deleted (killed before the tombstone) — the ``intents`` section."""
    from statekeeper import SyncStateStore
    from statekeeper.store import feed_intents as fi

    elsewhere = {"host": "worker-2", "boot": "b", "pidns": "p", "pid": 4242, "start": 7}
    with SyncStateStore(f"sqlite:///{path}", clock=lambda: BASE, witness=False) as store:
        for n in range(2):
            for agent_id in ("ticket-7", "ticket-9"):
                store.save(agent_id, {"n": n})
        backend, codec = store.store.backend, store.store.codec
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(time, "time", lambda: BASE)  # (when the intents were written)
            for agent_id, owner in (("ticket-7", None), ("ticket-9", elsewhere)):
                patch.setattr(fi, "claim_owner", lambda owner=owner: owner)
                at = store._portal.call(backend.read(agent_id, 1, 2))[-1]
                stream = fi.intent_stream(backend, agent_id)
                write = fi._write_intent(backend, codec, stream, agent_id, 2, at, False)
                store._portal.call(write)
        store._portal.call(backend.delete_agent("ticket-9"))


def _langgraph_source(path: Path) -> None:
    """A LangGraph ``SqliteSaver`` database: two finished chats and a review waiting at
    its ``interrupt()`` (what ``langgraph import`` transcripts move)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from ..integrations._lg_graphs import chat_graph, opening, review_graph

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        chat = chat_graph(3).compile(checkpointer=saver)
        for thread in ("chat-1", "chat-2"):
            chat.invoke({"messages": opening()}, {"configurable": {"thread_id": thread}})
        review = review_graph().compile(checkpointer=saver)
        review.invoke({"messages": opening(1)}, {"configurable": {"thread_id": "review-1"}})
    finally:
        conn.close()


@contextlib.contextmanager
def _demo_dir() -> Iterator[None]:
    """DEMO_DIR, emptied, held by this test alone (one demo transcript at a time on this
    machine: pytest-xdist workers and other checkouts' runs share the folder)."""
    DEMO_DIR.mkdir(exist_ok=True)
    with (DEMO_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # the demo reuses only a file it can prove it created: start from none (an
        # earlier run's file may predate the ownership marker)
        for leftover in DEMO_DIR.glob("demo*"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        yield


@contextlib.contextmanager
def _steady_bench_timer() -> Iterator[None]:
    """``statekeeper bench`` measuring every save and load as 0.2 ms (each reading of its
    timer 0.2 ms after the one before), whatever the machine's load."""
    from statekeeper.bench import seed

    readings = itertools.count()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seed, "timer", lambda: next(readings) * 0.0002)
        yield


def _run(spec: str, cwd: Path) -> tuple[str, str, str]:
    """(the command line, the transcript body, comparison mode) for one marker."""
    parts = [p.strip() for p in spec.split(";")]
    argv = shlex.split(parts[0])
    expected = 0
    mode = "exact"
    for opt in parts[1:]:
        if opt.startswith("exit "):
            expected = int(opt.split()[1])
        elif opt in ("loose", "shape"):
            mode = opt
        else:  # pragma: no cover - a typo in the doc
            raise AssertionError(f"unknown transcript option {opt!r}")
    if argv[0] == "demo":  # processes killed and recovered: a real process, in DEMO_DIR
        with _demo_dir():
            result = sk(*argv, cwd=cwd)
    elif argv[0] == "bench":  # measured latency against the claims: see the docstring
        with _steady_bench_timer():
            result = sk_in_process(*argv, cwd=cwd)
    else:  # the console script's entry point in this process: same output, no start-up
        result = sk_in_process(*argv, cwd=cwd)
    assert result.returncode == expected, (spec, result.stdout, result.stderr)
    out = "\n".join(line.rstrip() for line in (result.stdout + result.stderr).splitlines())
    body = f"```console\n$ statekeeper {parts[0]}\n{out.rstrip()}\n"
    if expected:
        body += f"$ echo $?\n{expected}\n"
    return parts[0], body + "```\n", mode


def _mask(text: str) -> str:
    # numbers masked, a number with thousands separators or decimals as one ("206" and
    # "1,735" agents/s are the same shape); a table rule's length follows its column
    # widths, which follow the numbers, so a run of rule characters counts as one
    return " ".join(re.sub(r"[─━═]+", "─", re.sub(r"\d+(?:[,.]\d+)*", "#", text)).split())


_TOLD = re.compile(r"[a-z ]+: statekeeper ")
_SHAPE = ("statekeeper demo", "Timeline", "Tool calls", "╭─ Recovered", "✓", "every tool")


def _same(doc: str, fresh: str, mode: str) -> bool:
    if mode == "shape":
        doc, fresh = (
            "\n".join(x for x in t.splitlines() if x.startswith(_SHAPE)) for t in (doc, fresh)
        )
    if mode == "exact":
        return doc == fresh
    return _mask(doc) == _mask(fresh)


@pytest.mark.parametrize("name", TRANSCRIBED)
def test_md_transcripts_are_the_cli_output(name: str, tmp_path: Path) -> None:
    doc = DOCS_DIR / name
    _scratch(tmp_path)
    text = doc.read_text()
    fresh: list[tuple[re.Match[str], str, str]] = []
    for match in BLOCK.finditer(text):
        _, body, mode = _run(match["spec"], tmp_path)
        fresh.append((match, body, mode))
    assert fresh, f"no transcripts found in docs/{name}"
    if os.environ.get("STATEKEEPER_UPDATE_DOCS") == "1":
        out, last = [], 0
        for match, body, _ in fresh:
            out += [text[last : match.start("body")], body]
            last = match.end("body")
        doc.write_text("".join(out) + text[last:])
        return
    for _, body, _ in fresh:  # 80 columns (command lines, JSON, one-line errors aside,
        # and a command the user is told to run: "inspect it: statekeeper ...", never wrapped)
        for line in body.splitlines():
            if not line.startswith(("{", "error:", "Error:", "$ ")) and not _TOLD.match(line):
                assert cell_len(line) <= 80 and "…" not in line, line
    stale = []
    for match, body, mode in fresh:
        if not _same(match["body"], body, mode):
            stale.append(f"--- in docs/{name}\n{match['body']}--- the CLI prints\n{body}")
    assert not stale, (
        f"docs/{name} transcripts differ from the CLI (rewrite them with "
        "STATEKEEPER_UPDATE_DOCS=1):\n" + "\n".join(stale)
    )


def test_the_bench_transcript_does_not_follow_the_machine_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine so loaded that every operation takes 5 ms (the process's clock says
    so), the ``bench`` transcript is still the doc's: once, under load 16, In-Memory's
    p50 passed the seed's 1 ms and its verdict read "slower" (a stale transcript)."""
    readings = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: next(readings) * 0.005)
    (match,) = [m for m in BLOCK.finditer(DOC.read_text()) if m["spec"].startswith("bench ")]
    _, body, mode = _run(match["spec"], tmp_path)
    assert _same(match["body"], body, mode), body


def test_cli_md_documents_every_command() -> None:
    text = DOC.read_text()
    headings = re.findall(r"^##+ .*$", text, re.MULTILINE)
    root = load_all(typer.main.get_command(app))
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        if getattr(cmd, "hidden", False):
            continue
        assert any(f"`{name}" in h for h in headings), f"docs/cli.md has no section on {name}"
        ran = re.findall(rf"<!-- transcript: {name}\b", text)
        assert ran, f"docs/cli.md shows no transcript of {name}"
