"""The crash/recover demo: a deterministic research agent that is SIGKILLed mid-run.

Three pieces live here, all free of rich/typer so that the worker process starts fast:

* **The agent.** A research agent (no LLM) answers "which archived city is the most
  densely populated, and by how much does it exceed the average?". Its planner
  (:func:`next_action`) is a pure function of the agent's durable data document, so a
  process that reloads the data continues with exactly the call the dead one would
  have made next. Its tools do real work on a small on-disk corpus: ``search`` (BM25
  over the files), ``fetch`` (read + SHA-256) and ``calculator`` (an ``ast``-checked
  arithmetic evaluator).
* **The worker** (``python -m statekeeper.cli.demo …``): runs the agent against a
  SQLite store and prints one JSON line per committed event, so the parent knows how
  far it got.
* **The orchestration** (:func:`run_demo`): starts the worker, SIGKILLs it right after
  it reports a chosen seq, reopens the store in this process (timed: that is the
  recovery time), finishes the agent, and checks from the tools' own fsynced log that
  every tool call executed exactly once.

Why a completed call is never repeated: the tool result is written into ``data`` in
the *same* append as the ``receive_result`` transition out of ``TOOL_CALL``; after a
crash the planner sees the result and moves on. A call that was *in flight* when the
process died (its ``call_tool`` intent is stored, its result is not) has to be invoked
again — no store can know whether an outside effect happened — so it is re-invoked
with the same ``call_id``, which the tools honour as an idempotency key, like a
payment API does. The demo reports such a call as "replayed", never as executed twice.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import math
import operator
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, NotOwned, StatekeeperError
from ..machine import AgentState, AgentStateMachine, StateTransition
from ..store import DurableAgent, StateStore

__all__ = [
    "DEFAULT_DB",
    "FIRST_RESULT_SEQ",
    "TOTAL_EVENTS",
    "DemoFailed",
    "DemoResult",
    "ToolBox",
    "drive",
    "next_action",
    "run_demo",
]

#: where the demo keeps its store unless ``--db`` says otherwise
DEFAULT_DB = "statekeeper-demo.db"
AGENT_PREFIX = "demo-research-"
QUESTION = (
    "Which city in the archive is the most densely populated, "
    "and by how much does it exceed the average density?"
)
SEARCH_QUERY = "city population area"
TOP_K = 4
#: events of one full run: created, start_processing, 2 per tool call (1 search,
#: TOP_K fetches, TOP_K densities, 1 average), complete
TOOL_CALLS = 1 + TOP_K + TOP_K + 1
TOTAL_EVENTS = 2 + 2 * TOOL_CALLS + 1
#: seq of the first ``receive_result``: the earliest kill that follows a completed call
FIRST_RESULT_SEQ = 4


class DemoFailed(StatekeeperError):
    """The demo could not run as designed (worker died early, timed out...)."""


# ---------------------------------------------------------------------------- corpus

_CITIES = [
    ("Aldermoor", 1_204_000, "312", "a river port famous for its slate roofs"),
    ("Brightwater", 842_500, "96.4", "a compact harbour city built on reclaimed land"),
    ("Corvell Bay", 2_310_750, "1,050", "a sprawling bay city of suburbs and orchards"),
    ("Dunmarrow", 415_200, "58.2", "an old walled city squeezed between two hills"),
]
_OTHER = [
    (
        "Sourdough starters",
        "A starter is flour and water kept alive by wild yeast. Feed it "
        "daily, keep it warm, and discard half before each feeding.",
    ),
    (
        "River otters",
        "Otters hunt along the banks at dusk. Their dens, called holts, are "
        "dug into roots near the water.",
    ),
    (
        "The lighthouse festival",
        "Every autumn the keepers open the tower for one night; "
        "visitors climb the spiral stairs and watch the beam turn.",
    ),
    (
        "Reading tide tables",
        "High and low water times shift by about fifty minutes a day; "
        "springs and neaps follow the moon.",
    ),
]


def corpus_documents() -> dict[str, str]:
    """The archive the agent researches: ``doc_id -> text`` (first line is the title)."""
    docs: dict[str, str] = {}
    n = 0
    for i in range(max(len(_CITIES), len(_OTHER))):
        if i < len(_OTHER):
            n += 1
            title, body = _OTHER[i]
            docs[f"doc-{n:02d}"] = f"{title}\n\n{body}\n"
        if i < len(_CITIES):
            n += 1
            name, pop, area, blurb = _CITIES[i]
            docs[f"doc-{n:02d}"] = (
                f"{name}\n\n{name} is {blurb}. The last census counted a population of "
                f"{pop:,}. The city covers an area of {area} square kilometres, with its "
                f"population concentrated around the old centre.\n"
            )
    return docs


def write_corpus(folder: Path) -> None:
    """Write the corpus files (deterministic content) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, text in corpus_documents().items():
        (folder / f"{doc_id}.txt").write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------- tools

_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def tool_search(corpus: Path, query: str, top_k: int = TOP_K) -> dict[str, Any]:
    """BM25 over every file of the corpus (read from disk on each call)."""
    docs = {p.stem: _tokens(p.read_text(encoding="utf-8")) for p in sorted(corpus.glob("*.txt"))}
    if not docs:
        raise FileNotFoundError(f"no documents in {corpus}")
    avg_len = sum(len(t) for t in docs.values()) / len(docs)
    terms = _tokens(query)
    scores: dict[str, float] = {}
    for doc_id, toks in docs.items():
        score = 0.0
        for term in terms:
            df = sum(1 for t in docs.values() if term in t)
            tf = toks.count(term)
            if not tf:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(toks) / avg_len))
        if score > 0:
            scores[doc_id] = round(score, 4)
    hits = sorted(scores, key=lambda d: (-scores[d], d))[:top_k]
    return {
        "query": query,
        "hits": hits,
        "scores": {d: scores[d] for d in hits},
        "documents_scanned": len(docs),
    }


def tool_fetch(corpus: Path, doc_id: str) -> dict[str, Any]:
    """Read one document and fingerprint it."""
    if not re.fullmatch(r"doc-\d+", doc_id):
        raise ValueError(f"bad document id {doc_id!r}")
    raw = (corpus / f"{doc_id}.txt").read_bytes()
    text = raw.decode("utf-8")
    return {
        "doc_id": doc_id,
        "title": text.split("\n", 1)[0],
        "text": text,
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return float(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def tool_calculator(corpus: Path, expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression (numbers, + - * / **, parentheses)."""
    value = float(_evaluate(ast.parse(expression, mode="eval")))
    return {"expression": expression, "value": round(value, 6)}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "search": tool_search,
    "fetch": tool_fetch,
    "calculator": tool_calculator,
}


class ToolBox:
    """Runs tools and logs every invocation to a side file (append, flush, fsync).

    The log is the ground truth the demo checks: a line per invocation with the agent,
    ``call_id``, tool, pid and ``run`` = ``executed`` (the tool did its work) or
    ``replayed`` (the ``call_id`` had already executed: the recorded result is returned
    and the work is *not* redone — the tool honours ``call_id`` as an idempotency key).
    """

    def __init__(self, corpus: Path, log_path: Path, agent_id: str) -> None:
        self.corpus = corpus
        self.log_path = log_path
        self.agent_id = agent_id

    def entries(self) -> list[dict[str, Any]]:
        """This agent's log lines, oldest first."""
        return [e for e in read_tool_log(self.log_path) if e.get("agent_id") == self.agent_id]

    def invoke(self, call_id: str, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``tool`` for ``call_id`` (or replay its recorded result) and log it."""
        for entry in self.entries():
            if entry["call_id"] == call_id and entry["run"] == "executed":
                result: dict[str, Any] = entry["result"]
                self._log(call_id, tool, args, "replayed", result)
                return result
        result = TOOLS[tool](self.corpus, **args)
        self._log(call_id, tool, args, "executed", result)
        return result

    def _log(
        self, call_id: str, tool: str, args: Mapping[str, Any], run: str, result: dict[str, Any]
    ) -> None:
        line = json.dumps(
            {
                "agent_id": self.agent_id,
                "call_id": call_id,
                "tool": tool,
                "args": dict(args),
                "run": run,
                "pid": os.getpid(),
                "t": time.time(),
                "result": result,
            },
            sort_keys=True,
        )
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def read_tool_log(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the tool log (a torn last line, if any, is ignored)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


# ----------------------------------------------------------------------------- agent


def initial_data() -> dict[str, Any]:
    """The data document a new demo agent starts with."""
    return {"question": QUESTION, "results": {}, "facts": {}, "notes": []}


def planned_calls(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every tool call the agent plans, given the results it has so far (pure)."""
    results: Mapping[str, Any] = data.get("results", {})
    n = 0

    def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"call_id": f"call-{n:02d}-{tool}", "tool": tool, "args": args}

    calls = [call("search", {"query": SEARCH_QUERY})]
    search = results.get(calls[0]["call_id"])
    if search is None:
        return calls
    fetches = [call("fetch", {"doc_id": doc}) for doc in search["hits"]]
    calls += fetches
    facts = data.get("facts", {})
    densities = []
    for fetch in fetches:
        fact = facts.get(fetch["args"]["doc_id"])
        if fact is None:
            return calls
        densities.append(
            call("calculator", {"expression": f"{fact['population']} / {fact['area_km2']}"})
        )
    calls += densities
    values = [results[c["call_id"]]["value"] for c in densities if c["call_id"] in results]
    if len(values) < len(densities):
        return calls
    calls.append(
        call(
            "calculator", {"expression": f"({' + '.join(repr(v) for v in values)}) / {len(values)}"}
        )
    )
    return calls


def next_action(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first planned call without a result, or None when the research is done."""
    results = data.get("results", {})
    for c in planned_calls(data):
        if c["call_id"] not in results:
            return c
    return None


def _number(text: str) -> float:
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() else value


def absorb(data: dict[str, Any], call: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    """Process a tool result: record it and take notes (written with the same append)."""
    data["results"][call["call_id"]] = dict(result)
    notes: list[str] = data["notes"]
    if call["tool"] == "search":
        notes.append(
            f"search {result['query']!r}: {len(result['hits'])} of "
            f"{result['documents_scanned']} documents match: {', '.join(result['hits'])}"
        )
    elif call["tool"] == "fetch":
        text = result["text"]
        pop = re.search(r"population of ([\d,]+)", text)
        area = re.search(r"area of ([\d,.]+) square kilometres", text)
        if pop is None or area is None:
            notes.append(f"{result['doc_id']} ({result['title']}): no census figures")
            return
        data["facts"][result["doc_id"]] = {
            "city": result["title"],
            "population": _number(pop.group(1)),
            "area_km2": _number(area.group(1)),
            "sha256": result["sha256"][:16],
        }
        notes.append(f"{result['title']}: population {pop.group(1)}, {area.group(1)} km²")
    elif call["tool"] == "calculator":
        for fact in data["facts"].values():
            if call["args"]["expression"] == f"{fact['population']} / {fact['area_km2']}":
                fact["density"] = result["value"]
                notes.append(f"{fact['city']}: {result['value']:,.1f} people/km²")
                return
        data["average_density"] = result["value"]
        notes.append(f"average density: {result['value']:,.1f} people/km²")


def compose_answer(data: Mapping[str, Any]) -> str:
    """The agent's final answer, from its facts."""
    facts = [f for f in data["facts"].values() if "density" in f]
    top = max(facts, key=lambda f: f["density"])
    avg = data["average_density"]
    return (
        f"{top['city']} is the most densely populated city in the archive at "
        f"{top['density']:,.1f} people/km², {top['density'] / avg:.2f}x the average of "
        f"{avg:,.1f} across {len(facts)} cities."
    )


OnCommit = Callable[[DurableAgent, dict[str, Any]], None]


async def drive(
    agent: DurableAgent,
    tools: ToolBox,
    *,
    actor: str,
    step_delay: float = 0.0,
    on_commit: OnCommit | None = None,
) -> None:
    """Run the agent from wherever its stored state says it is until COMPLETED.

    Each loop iteration makes exactly one durable transition. ``step_delay`` is
    pacing only (a pause between steps so a kill can land mid-run); it stands in for
    nothing.
    """

    async def step(event: StateTransition, meta: dict[str, Any]) -> None:
        source = agent.machine.state_value
        if not await agent.transition(event, meta, actor=actor):
            raise ConfigurationError(f"demo agent cannot fire {event.value} from {source}")
        if on_commit is not None:
            on_commit(
                agent,
                {
                    "seq": agent.seq,
                    "event": event.value,
                    "from": source,
                    "to": agent.machine.state_value,
                    **meta,
                },
            )
        if step_delay > 0:
            await asyncio.sleep(step_delay)

    while True:
        state = agent.state
        data = agent.data
        if state is AgentState.COMPLETED:
            return
        if state is AgentState.IDLE:
            data["plan"] = [
                f"search the archive for {SEARCH_QUERY!r}",
                f"fetch the top {TOP_K} documents and read the census figures",
                "compute each city's density, then the average",
                "answer with the densest city and its ratio to the average",
            ]
            await step(StateTransition.START_PROCESSING, {})
        elif state is AgentState.PROCESSING:
            action = next_action(data)
            if action is None:
                data["answer"] = compose_answer(data)
                await step(StateTransition.COMPLETE, {})
            else:
                data["pending"] = action
                await step(
                    StateTransition.CALL_TOOL,
                    {"call_id": action["call_id"], "tool": action["tool"], "args": action["args"]},
                )
        elif state is AgentState.TOOL_CALL:
            pending = data["pending"]
            if pending["call_id"] not in data["results"]:
                result = tools.invoke(pending["call_id"], pending["tool"], pending["args"])
                absorb(data, pending, result)
            del data["pending"]
            # the result and the transition out of TOOL_CALL are ONE append
            await step(
                StateTransition.RECEIVE_RESULT,
                {"call_id": pending["call_id"], "tool": pending["tool"]},
            )
        else:
            raise ConfigurationError(f"demo agent is in unexpected state {state}")


# ---------------------------------------------------------------------------- worker


async def _worker(
    url: str, agent_id: str, files: Path, step_delay: float, snapshot_every: int
) -> None:
    def emit(agent: DurableAgent, info: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({**info, "t": time.time()}) + "\n")
        sys.stdout.flush()

    async with StateStore(url, snapshot_every=snapshot_every) as store:
        agent = await store.agent(agent_id, AgentStateMachine(), initial_data=initial_data())
        if agent.seq == 1:
            emit(
                agent, {"seq": 1, "event": "created", "from": None, "to": agent.machine.state_value}
            )
        tools = ToolBox(files / "corpus", files / "tools.log", agent_id)
        await drive(
            agent, tools, actor=f"worker:{os.getpid()}", step_delay=step_delay, on_commit=emit
        )


def worker_main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process (``python -m statekeeper.cli.demo``)."""
    parser = argparse.ArgumentParser(
        prog="python -m statekeeper.cli.demo",
        description="statekeeper demo worker (started by `statekeeper demo`)",
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--files", required=True, type=Path)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--snapshot-every", type=int, default=8)
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps({"hello": os.getpid()}) + "\n")
    sys.stdout.flush()
    asyncio.run(_worker(args.url, args.agent, args.files, args.step_delay, args.snapshot_every))
    return 0


# ----------------------------------------------------------------------- orchestration


@dataclass
class DemoResult:
    """Everything :func:`run_demo` observed; :meth:`summary` is the ``--json`` output."""

    db_path: str
    agent_id: str
    kill_after: int
    worker_pid: int = 0
    worker_returncode: int | None = None
    worker_last_seq: int = 0
    resume_pid: int = 0
    recovery_ms: float = 0.0
    recovered: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    verify: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    tool_log: str = ""

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return bool(self.checks) and all(self.checks.values())

    @property
    def killed(self) -> bool:
        """True when the worker died of SIGKILL."""
        return self.worker_returncode == -signal.SIGKILL

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "ok": self.ok,
            "db": self.db_path,
            "tool_log": self.tool_log,
            "agent_id": self.agent_id,
            "kill_after_seq": self.kill_after,
            "worker": {
                "pid": self.worker_pid,
                "returncode": self.worker_returncode,
                "signal": "SIGKILL" if self.killed else None,
                "last_seq": self.worker_last_seq,
            },
            "resumed_by_pid": self.resume_pid,
            "recovery_ms": round(self.recovery_ms, 3),
            "recovered": self.recovered,
            "final": self.final,
            "tool_calls": self.tool_calls,
            "checks": self.checks,
            "verify": self.verify,
            "timeline": self.timeline,
        }


Reporter = Callable[[str, dict[str, Any]], None]


def sqlite_path(db: str) -> Path:
    """The file behind a SQLite URL or bare path; ConfigurationError for other backends."""
    if "://" not in db:
        return Path(db)
    scheme, rest = db.split("://", 1)
    if scheme.lower() != "sqlite":
        raise ConfigurationError(
            f"the demo needs a SQLite file (two processes share it), not {db!r}"
        )
    rest, _, query = rest.partition("?")
    if query:
        raise ConfigurationError(
            f"the demo takes a plain SQLite path or sqlite:/// URL, without options: {db!r}"
        )
    return Path(rest[1:] if rest.startswith("/") else rest)


def files_dir(db_path: Path) -> Path:
    """The folder next to the demo database holding the corpus and the tool log."""
    return db_path.with_name(db_path.stem + "-files")


#: the demo's ownership marker in its files folder (written when it creates the folder)
FILES_MARKER = ".statekeeper-demo"


async def _agent_ids(url: str) -> list[str]:
    from ..backends.url import open_backend

    async with StateStore(open_backend(url, readonly=True)) as store:
        return [info.agent_id async for info in store.iter_agents()]


def _check_owned(db_path: Path) -> None:
    """Refuse (:class:`~statekeeper.errors.NotOwned`, nothing touched) a database file
    or files folder the demo cannot prove it created."""
    from ..backends.sqlite_files import describe, inspect_sqlite_file

    info = inspect_sqlite_file(db_path)
    if info.kind != "missing" and not info.owned:
        raise NotOwned(
            f"refusing to touch {db_path}: it {describe(info)} that statekeeper did not "
            "create (no statekeeper marker); choose another --db"
        )
    files = files_dir(db_path)
    if files.exists() and not (files / FILES_MARKER).is_file():
        raise NotOwned(
            f"refusing to touch {files}: the demo did not create that folder (no "
            f"{FILES_MARKER} marker in it); choose another --db"
        )


def _claim_files(files: Path) -> None:
    files.mkdir(parents=True, exist_ok=True)
    (files / FILES_MARKER).write_text(
        "created by `statekeeper demo`; it may delete what it wrote here\n", encoding="utf-8"
    )


def _prepare(db_path: Path, keep: bool) -> str:
    """Check the database and its files folder are the demo's (or new), wipe them
    unless ``keep``; return the agent id to use."""
    _check_owned(db_path)
    existing: list[str] = []
    if db_path.exists():
        existing = asyncio.run(_agent_ids(f"sqlite:///{db_path}"))
        foreign = [a for a in existing if not a.startswith(AGENT_PREFIX)]
        if foreign and not keep:
            raise ConfigurationError(
                f"{db_path} holds agents the demo did not create (e.g. {foreign[0]!r}); "
                "refusing to wipe it: choose another --db, or pass --keep"
            )
    if not keep:
        for suffix in ("", "-wal", "-shm", "-journal", ".sk-witness", ".sk-witness.lock"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        (files_dir(db_path) / "tools.log").unlink(missing_ok=True)
        existing = []
    numbers = [
        int(a[len(AGENT_PREFIX) :])
        for a in existing
        if a.startswith(AGENT_PREFIX) and a[len(AGENT_PREFIX) :].isdigit()
    ]
    return f"{AGENT_PREFIX}{max(numbers, default=0) + 1}"


def _spawn(
    url: str, agent_id: str, files: Path, step_delay: float, snapshot_every: int, stderr: Any
) -> subprocess.Popen[str]:
    import statekeeper

    env = dict(os.environ)
    src = str(Path(statekeeper.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "statekeeper.cli.demo",
        "--url",
        url,
        "--agent",
        agent_id,
        "--files",
        str(files),
        "--step-delay",
        repr(step_delay),
        "--snapshot-every",
        str(snapshot_every),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True, name="sk-demo-worker-stdout").start()
    return q


def _run_worker_until_kill(
    result: DemoResult,
    url: str,
    files: Path,
    step_delay: float,
    snapshot_every: int,
    timeout: float,
    report: Reporter,
) -> None:
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        proc = _spawn(url, result.agent_id, files, step_delay, snapshot_every, err)
        result.worker_pid = proc.pid
        report("worker_started", {"pid": proc.pid})
        lines = _lines(proc)
        deadline = time.monotonic() + timeout
        sent_kill = False
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    proc.kill()
                    raise DemoFailed(
                        f"the worker made no progress for {timeout:.0f}s; killed it"
                    ) from None
                if line is None:
                    break
                msg = json.loads(line)
                if "seq" not in msg:
                    continue
                result.worker_last_seq = msg["seq"]
                if sent_kill:
                    # committed after the signal was sent but before it landed
                    report("worker_commit_after_kill", msg)
                    continue
                report("worker_commit", msg)
                if msg["seq"] >= result.kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    sent_kill = True
                    report("kill_sent", {"pid": proc.pid, "seq": msg["seq"]})
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        result.worker_returncode = proc.returncode
        if not sent_kill:
            err.seek(0)
            tail = "\n".join(err.read().strip().splitlines()[-15:])
            raise DemoFailed(
                f"the worker exited with code {proc.returncode} before reaching seq "
                f"{result.kill_after}" + (f":\n{tail}" if tail else "")
            )
        if proc.returncode != -signal.SIGKILL:
            raise DemoFailed(
                f"the worker exited (code {proc.returncode}) before the SIGKILL landed; "
                "use a larger --step-delay or an earlier --kill-after"
            )
        report(
            "worker_died",
            {"pid": proc.pid, "returncode": proc.returncode, "last_seq": result.worker_last_seq},
        )


def _position(agent: DurableAgent) -> dict[str, Any]:
    data = agent.data
    pending = data.get("pending") if agent.state is AgentState.TOOL_CALL else None
    in_flight = None
    if pending is not None and pending["call_id"] not in data.get("results", {}):
        in_flight = pending
    nxt = in_flight or (next_action(data) if agent.state is not AgentState.COMPLETED else None)
    return {
        "state": agent.machine.state_value,
        "seq": agent.seq,
        "step": len(data.get("results", {})),
        "tool_calls_done": sorted(data.get("results", {})),
        "in_flight": in_flight,
        "next": nxt,
    }


async def _resume(
    result: DemoResult,
    url: str,
    files: Path,
    snapshot_every: int,
    step_delay: float,
    report: Reporter,
    amnesia: bool,
) -> set[str]:
    """Reopen the store (timed), finish the agent, collect timeline and verification."""
    result.resume_pid = os.getpid()
    t0 = time.perf_counter()
    store = StateStore(url, snapshot_every=snapshot_every)
    try:
        agent = await store.agent(result.agent_id, AgentStateMachine())
        result.recovery_ms = (time.perf_counter() - t0) * 1000.0
        snap = await store.backend.latest_snapshot(result.agent_id, agent.seq)
        snap_seq = snap.seq if snap is not None else 0
        result.recovered = {
            **_position(agent),
            "snapshot_seq": snap_seq,
            "events_replayed": agent.seq - snap_seq,
        }
        completed_before = set(agent.data.get("results", {}))
        report("recovered", {"recovery_ms": result.recovery_ms, **result.recovered})
        if amnesia:  # deliberately broken resume, to show the checks catch it
            agent.data.update(results={}, facts={})
            agent.data.pop("average_density", None)
        tools = ToolBox(files / "corpus", files / "tools.log", result.agent_id)
        await drive(
            agent,
            tools,
            actor=f"resume:{os.getpid()}",
            step_delay=step_delay,
            on_commit=lambda a, info: report("resume_commit", info),
        )
        final = await store.load(result.agent_id)
        result.final = {
            "state": final.fsm_state,
            "seq": final.seq,
            "answer": final.data.get("answer"),
            "notes": final.data.get("notes"),
        }
        async for ev in store.history(result.agent_id):
            meta = ev.data.get("metadata", {})
            result.timeline.append(
                {
                    "seq": ev.seq,
                    "ts": ev.timestamp,
                    "type": ev.type,
                    "event": ev.data.get("event"),
                    "from": ev.data.get("from"),
                    "to": ev.data.get("to", ev.fsm_state),
                    "tool": meta.get("tool"),
                    "call_id": meta.get("call_id"),
                    "actor": ev.actor,
                }
            )
        report_v = await store.verify([result.agent_id])
        result.verify = {
            "ok": report_v.ok,
            "events": report_v.events,
            "snapshots": report_v.snapshots,
            "problems": [p.reason for p in report_v.problems],
        }
        return completed_before
    finally:
        await store.close()


def _check(
    result: DemoResult,
    completed_before: set[str],
    log: list[dict[str, Any]],
    final_data_calls: list[dict[str, Any]],
) -> None:
    planned = {c["call_id"]: c["tool"] for c in final_data_calls}
    by_call: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        by_call.setdefault(entry["call_id"], []).append(entry)
    rows = []
    for call_id in sorted(set(planned) | set(by_call)):
        entries = by_call.get(call_id, [])
        executed = [e for e in entries if e["run"] == "executed"]
        after_crash = [e for e in entries if e["pid"] == result.resume_pid]
        rows.append(
            {
                "call_id": call_id,
                "tool": planned.get(call_id) or entries[0]["tool"],
                "executed": len(executed),
                "replayed": len(entries) - len(executed),
                "executed_by": [
                    ("worker" if e["pid"] == result.worker_pid else "resume") for e in executed
                ],
                "completed_before_crash": call_id in completed_before,
                "invoked_after_crash": len(after_crash),
            }
        )
    result.tool_calls = rows
    result.checks = {
        "worker_killed_by_sigkill": result.killed,
        "resumed_from_store": result.recovered.get("seq", 0) >= result.kill_after,
        "completed": result.final.get("state") == AgentState.COMPLETED.value,
        "every_tool_call_executed_exactly_once": bool(rows)
        and all(r["executed"] == 1 for r in rows)
        and set(planned) == {r["call_id"] for r in rows},
        "no_completed_call_repeated_after_crash": all(
            r["invoked_after_crash"] == 0 for r in rows if r["completed_before_crash"]
        ),
        "store_verified": bool(result.verify.get("ok")),
    }


def run_demo(
    db: str = DEFAULT_DB,
    *,
    keep: bool = False,
    kill_after: int | None = None,
    seed: int | None = None,
    step_delay: float = 0.1,
    snapshot_every: int = 8,
    timeout: float = 60.0,
    report: Reporter | None = None,
    amnesia: bool = False,
) -> DemoResult:
    """Run the demo end to end; see the module docstring. Raises :class:`DemoFailed`
    when the worker could not be killed mid-run, ``ConfigurationError`` for bad options."""
    report = report or (lambda kind, info: None)
    if kill_after is None:
        kill_after = random.Random(seed).randint(FIRST_RESULT_SEQ, TOTAL_EVENTS - 1)
    if not FIRST_RESULT_SEQ <= kill_after <= TOTAL_EVENTS - 1:
        raise ConfigurationError(
            f"--kill-after must be between {FIRST_RESULT_SEQ} (after the first tool result) "
            f"and {TOTAL_EVENTS - 1} (before the agent completes), got {kill_after}"
        )
    if step_delay < 0:
        raise ConfigurationError("--step-delay must be >= 0")
    if snapshot_every < 1:
        raise ConfigurationError("--snapshot-every must be >= 1")
    db_path = sqlite_path(db).absolute()
    files = files_dir(db_path)
    agent_id = _prepare(db_path, keep)
    _claim_files(files)
    write_corpus(files / "corpus")
    url = f"sqlite:///{db_path}"
    result = DemoResult(
        db_path=str(db_path),
        agent_id=agent_id,
        kill_after=kill_after,
        tool_log=str(files / "tools.log"),
    )
    report(
        "start",
        {
            "db": str(db_path),
            "agent_id": agent_id,
            "kill_after": kill_after,
            "total_events": TOTAL_EVENTS,
        },
    )
    _run_worker_until_kill(result, url, files, step_delay, snapshot_every, timeout, report)
    completed_before = asyncio.run(
        _resume(result, url, files, snapshot_every, step_delay, report, amnesia)
    )
    tools = ToolBox(files / "corpus", files / "tools.log", agent_id)

    async def final_data() -> dict[str, Any]:
        async with StateStore(url) as store:
            return (await store.load(agent_id)).data

    _check(result, completed_before, tools.entries(), planned_calls(asyncio.run(final_data())))
    return result


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    try:
        sys.exit(worker_main())
    except StatekeeperError as exc:
        sys.stderr.write(f"worker error: {exc}\n")
        sys.exit(2)
