"""Helpers shared by the storage benchmarks (not part of the library or the test suite)."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The statekeeper measured: this checkout's src/ (run from a checkout without `pip
# install -e .`, or with another tree's venv), unless PYTHONPATH names one — a same-run
# A/B runs one script with PYTHONPATH=<other tree>/src, which must not be overridden
# by this checkout's (it was, until 2026-12-03: both sides then measured the checkout).
if not os.environ.get("PYTHONPATH") and str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

# the workload and the percentile are the library's (``statekeeper bench`` uses them too)
from statekeeper.bench.workload import make_messages, percentile  # noqa: E402, F401


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine(*dists: str) -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
    }
    try:
        import psutil

        info["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    for dist in ("statekeeper", "orjson", *dists):
        info[dist] = version(dist)
    info["source"] = source_state()
    return info


def source_state() -> str:
    """``<commit>`` plus ``+dirty:<hash of src/>`` when src/ has uncommitted changes:
    other engineers edit src/ concurrently, so say exactly which code was measured."""
    import hashlib
    import subprocess

    import statekeeper

    tree = Path(statekeeper.__file__).resolve().parents[2]  # the tree actually imported
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if not dirty:
        return head
    h = hashlib.sha256()
    for f in sorted((tree / "src" / "statekeeper").rglob("*.py")):
        h.update(str(f.relative_to(tree)).encode())
        h.update(f.read_bytes())
    return f"{head}+dirty:{h.hexdigest()[:10]}"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def file_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of a SQLite database and its WAL after a TRUNCATE checkpoint."""
    path = os.fspath(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    total = 0
    for suffix in ("", "-wal"):
        p = path + suffix
        if os.path.exists(p):
            total += os.path.getsize(p)
    return total


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (readable as plain text too)."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


# ------------------------------------------------------------------------ workload


class Workload:
    """Per-agent message lists; step ``k`` of agent ``a`` is ``messages[a][:FIRST + k]``."""

    def __init__(self, agents: int, first: int, last: int, chars: int = 200) -> None:
        self.agent_ids = [f"agent-{i:03d}" for i in range(agents)]
        self.messages = {
            a: make_messages(last, seed=i, chars=chars) for i, a in enumerate(self.agent_ids)
        }
        self.sizes = list(range(first, last + 1))

    @property
    def saves(self) -> int:
        return len(self.agent_ids) * len(self.sizes)

    def docs(self, agent: str) -> list[dict[str, Any]]:
        msgs = self.messages[agent]
        return [{"messages": msgs[:n]} for n in self.sizes]


# ------------------------------------------------------------------ LangGraph SqliteSaver


def lg_open(path: str | os.PathLike[str], sync: str | None) -> Any:
    """A LangGraph ``SqliteSaver`` on its own connection (``setup()`` sets WAL);
    ``sync`` sets ``PRAGMA synchronous`` (None: SQLite's compiled default)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.fspath(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if sync is not None:
        conn.execute(f"PRAGMA synchronous={sync}")
    return saver


def lg_plan(saver: Any, docs: Sequence[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """(checkpoint, metadata, new_versions) per document, as a LangGraph loop builds them."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    out = []
    cp = empty_checkpoint()
    version = None
    for step, doc in enumerate(docs):
        version = saver.get_next_version(version, None)
        cp = dict(cp)
        cp["channel_versions"] = {"messages": version}
        cp["versions_seen"] = {"agent": {"messages": version}}
        cp["channel_values"] = {"messages": doc["messages"]}
        cp = create_checkpoint(cp, None, step)
        out.append((cp, {"source": "loop", "step": step, "parents": {}}, {"messages": version}))
    return out


def lg_checkpoints(saver: Any, wl: Workload, agent: str) -> list[tuple[Any, Any, Any]]:
    """:func:`lg_plan` of one agent's documents in ``wl``."""
    return lg_plan(saver, wl.docs(agent))


def lg_config(agent: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": agent, "checkpoint_ns": ""}}


def lg_loads_in_window(db: Path, thread: str, n: int, window: Any) -> None:
    """``n`` ``SqliteSaver.get_tuple`` of ``thread`` in ``db`` inside a callgrind
    window (``window.cg_start``/``cg_stop``), after 5 outside it."""
    saver = lg_open(db, None)
    cfg = lg_config(thread)
    for _ in range(5):
        saver.get_tuple(cfg)
    window.cg_start()
    for _ in range(n):
        saver.get_tuple(cfg)
    window.cg_stop()


# ------------------------------------------------------------------------- bare SQLite


class BareCommits:
    """Bare SQLite in WAL mode: ``rows`` INSERTs of ``row_bytes`` each per commit and
    nothing else -- the physical floor of a store that commits every save (rows=1),
    and the fsync-batching limit of one that groups N saves per commit (rows=N)."""

    def __init__(self, path: str | os.PathLike[str], sync: str, row_bytes: int = 500) -> None:
        self.conn = sqlite3.connect(os.fspath(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={sync}")
        self.conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")
        self.blob = b"x" * row_bytes
        self.next = 0

    def commit(self, rows: int = 1) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        if rows == 1:
            conn.execute("INSERT INTO t VALUES (?, ?)", (self.next, self.blob))
        else:
            conn.executemany(
                "INSERT INTO t VALUES (?, ?)",
                [(self.next + i, self.blob) for i in range(rows)],
            )
        conn.execute("COMMIT")
        self.next += rows

    def close(self) -> None:
        self.conn.close()


def commit_ceiling(
    path: str | os.PathLike[str], sync: str, n: int = 1000, row_bytes: int = 500, rows: int = 1
) -> dict[str, Any]:
    """Rows/s of ``n`` bare commits of ``rows`` rows each (see :class:`BareCommits`)."""
    bare = BareCommits(path, sync, row_bytes)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            bare.commit(rows)
        elapsed = time.perf_counter() - t0
    finally:
        bare.close()
    return {"rate": n * rows / elapsed, "commits_per_s": n / elapsed}


def profile_text(prof: Any, sort: str, top: int) -> str:
    """A cProfile/pstats table of the ``top`` functions by ``sort``."""
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(sort).print_stats(top)
    return buf.getvalue()


def best_cpu_us(fn: Callable[[], Any], n: int, r: int = 7) -> float:
    """Microseconds of CPU per call of ``fn``, the best of ``r`` runs of ``n`` calls
    (``time.thread_time``: the calling thread's CPU only, so a loaded machine's waits
    are not counted; its cache misses are)."""
    out = 1e9
    for _ in range(r):
        t = time.thread_time()
        for _ in range(n):
            fn()
        out = min(out, (time.thread_time() - t) / n * 1e6)
    return out
