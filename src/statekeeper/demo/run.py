"""The demo's orchestration (:func:`run_demo`): starts the worker, SIGKILLs it right
after it reports a chosen seq, reopens the store in this process (timed: that is the
recovery time), finishes the agent, and checks from the tools' own fsynced log that
every tool call executed exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, NotOwned
from ..machine import AgentState, AgentStateMachine
from ..store import DurableAgent, StateStore
from .agent import drive, next_action, planned_calls
from .constants import AGENT_PREFIX, DEFAULT_DB, FIRST_RESULT_SEQ, TOTAL_EVENTS, DemoFailed
from .tools import ToolBox, write_corpus

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


#: the files beside a demo database that are its own (SQLite's, its witness's)
_SIDE_FILES = ("-wal", "-shm", "-journal", ".sk-witness", ".sk-witness.lock")


def _check_owned(db_path: Path) -> None:
    """Refuse (:class:`~statekeeper.errors.NotOwned`, nothing touched) a database file
    or files folder the demo cannot prove it created, and a side file (``-journal``,
    ``-wal``, ``.sk-witness``...) beside a database that does not exist: wiping a run
    deletes them, and only a database the demo made vouches for its side files."""
    from ..backends.sqlite.files import describe, inspect_sqlite_file

    info = inspect_sqlite_file(db_path)
    if info.kind != "missing" and not info.owned:
        raise NotOwned(
            f"refusing to touch {db_path}: it {describe(info)} that statekeeper did not "
            "create (no statekeeper marker); choose another --db"
        )
    if info.kind == "missing":  # a side file of no database of the demo's: someone's
        for suffix in _SIDE_FILES:
            side = Path(f"{db_path}{suffix}")
            if os.path.lexists(side):
                raise NotOwned(
                    f"refusing to touch {side}: it is beside no database the demo made"
                    f" ({db_path} does not exist); remove it or choose another --db"
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
        for suffix in ("", *_SIDE_FILES):  # (the database's own: checked above)
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
        "statekeeper.demo",
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
            meta = ev.info.get("metadata", {})
            result.timeline.append(
                {
                    "seq": ev.seq,
                    "ts": ev.timestamp,
                    "type": ev.type,
                    "event": ev.info.get("event"),
                    "from": ev.info.get("from"),
                    "to": ev.info.get("to", ev.fsm_state),
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
