"""Where a chat turn's wall time goes, beyond CPU: statekeeper's saver vs ``SqliteSaver``.

The chat of ``bench_langgraph_goals.py`` (``durability="sync"``, SQLite
``synchronous=NORMAL``), every saver in the same process, rounds alternated. A window of
``--turns`` turns after ``--skip`` unmeasured ones (the history's depth). Per turn:

* ``wall_ms``, ``cpu_ms`` (``time.process_time``), ``caller_cpu_ms`` (``time.thread_time``
  of the thread calling ``invoke``), ``others_cpu_ms`` (the rest: LangGraph's executor
  threads, the saver's);
* from ``/proc/<tid>/schedstat`` of every thread (those started in the window recorded
  when they end): ``cpu[name]`` and ``runq[name]`` (time runnable but waiting for a
  core: the machine's load), ``runq_ms`` their sum;
* ``caller_off_cpu_ms`` = wall - the caller's CPU, and of it ``caller_asleep_ms`` (not
  runnable either: blocked on a lock, a future, I/O);
* ``commits_turn`` (write transactions: ``SqliteSaver``'s ``COMMIT`` statements, the
  SQLite backend's ``append_commits``), ``tail_ms`` (from the last ``put``/``put_writes``
  return to ``invoke``'s: a run's end, our claim's release);
* ``threads_started`` (``Thread.start`` calls: LangGraph makes an executor per
  ``invoke``), ``threads`` (most alive), ``writes_turn`` (``put`` + ``put_writes``).

``--also`` adds statekeeper variants (``sk-w0``: ``writes_wait=0``; ``sk-nofp``:
``fork_protection=False``); ``--only KIND`` runs one saver once (for ``strace -f -c``)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph_wall.py --turns 50 --rounds 6
    PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph_wall.py --turns 40 --skip 150
    PYTHONPATH=src strace -f -c -e trace=fsync,fdatasync,pwrite64,futex,clone3,epoll_wait \
        .venv/bin/python benchmarks/bench_langgraph_wall.py --turns 60 --only sk
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import contextlib

import _common  # noqa: F401  (PYTHONPATH wins)


def _variant(**options: Any) -> Any:
    def make(path: Path, sync: str) -> tuple[Any, Any]:
        from statekeeper.integrations.langgraph import StatekeeperSaver

        saver = StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}", **options)
        return saver, saver.close

    return make


#: statekeeper's saver with other options: held writes never held (``writes_wait=0``),
#: no run claims (``fork_protection=False``)
VARIANTS = {
    "sk-w0": _variant(writes_wait=0),
    "sk-nofp": _variant(fork_protection=False),
}


#: per thread (native id): its name, and its schedstat (CPU ns, run-queue wait ns) when
#: it started and when it ended (``/proc/thread-self/schedstat``)
NAMES: dict[int, str] = {}
STARTS: dict[int, tuple[int, int]] = {}
ENDS: dict[int, tuple[int, int]] = {}
STARTED = [0]


def _schedstat(path: str = "/proc/thread-self/schedstat") -> tuple[int, int]:
    with open(path) as f:
        cpu, wait, _ = f.read().split()
    return int(cpu), int(wait)


def _watch_threads() -> None:
    """Every thread records its schedstat when it starts and ends; starts counted."""
    run_, start_ = threading.Thread.run, threading.Thread.start

    def run(self: threading.Thread) -> None:
        tid = threading.get_native_id()
        NAMES[tid] = "".join(c for c in self.name if not c.isdigit()).rstrip("-_ ")
        STARTS[tid] = _schedstat()
        try:
            run_(self)
        finally:
            ENDS[tid] = _schedstat()

    def start(self: threading.Thread) -> None:
        STARTED[0] += 1
        start_(self)

    threading.Thread.run = run  # type: ignore[method-assign]
    threading.Thread.start = start  # type: ignore[method-assign]


def _now() -> dict[int, tuple[int, int]]:
    out = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            out[int(task.name)] = _schedstat(str(task / "schedstat"))
    return out


def _per_thread(base: dict[int, tuple[int, int]], ms: float) -> dict[str, float]:
    """CPU and run-queue wait (ms a turn) of every thread since ``base``, by name."""
    now = _now() | ENDS
    out: dict[str, float] = {}
    main = threading.main_thread().native_id
    for tid, (cpu, wait) in now.items():
        start = base.get(tid) or STARTS.get(tid)
        if start is None:
            continue
        name = "caller" if tid == main else NAMES.get(tid, "?")
        for what, value in (("cpu", cpu - start[0]), ("runq", wait - start[1])):
            out[f"{what}[{name}]"] = out.get(f"{what}[{name}]", 0.0) + value / 1e6 * ms
    out["runq_ms"] = sum(v for k, v in out.items() if k.startswith("runq["))
    return dict(sorted(out.items()))


def _commits(kind: str, saver: Any) -> Callable[[], int]:
    """The write transactions committed so far: ``SqliteSaver``'s ``COMMIT`` statements
    (its connection's trace callback), the SQLite backend's ``append_commits``."""
    if kind == "sqlite":
        seen = [0]

        def traced(sql: str) -> None:
            seen[0] += sql.strip().upper() == "COMMIT"

        saver.conn.set_trace_callback(traced)
        return lambda: seen[0]
    backend = saver.store.backend
    return lambda: int(backend.append_commits)


def _last_return(saver: Any) -> list[float]:
    """``[when the saver's last put / put_writes returned]`` (``perf_counter``): a
    turn's tail is from then to ``invoke``'s return (a run's end: our claim's release)."""
    last = [0.0]
    for name in ("put", "put_writes"):
        call = getattr(saver, name)

        def timed(*a: Any, _call: Any = call, **k: Any) -> Any:
            try:
                return _call(*a, **k)
            finally:
                last[0] = time.perf_counter()

        setattr(saver, name, timed)
    return last


def run(kind: str, tmp: Path, turns: int, skip: int = 0) -> dict[str, float]:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import SAVERS, Counting, chat_graph

    saver, close = (VARIANTS.get(kind) or SAVERS[kind])(
        tmp / f"{kind}-{time.monotonic_ns()}.db", "NORMAL"
    )
    commits = _commits(kind, saver)
    last = _last_return(saver)
    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}}
    inputs = [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(skip + turns)]
    for message in inputs[:skip]:  # not measured: the history grows to ``skip`` turns
        graph.invoke({"messages": [message]}, cfg, durability="sync")
    inputs = inputs[skip:]
    threads = 0
    ENDS.clear()
    STARTED[0] = 0
    writes0 = counting.writes
    base = _now()
    commits0, tail = commits(), 0.0
    wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    for message in inputs:
        graph.invoke({"messages": [message]}, cfg, durability="sync")
        tail += time.perf_counter() - last[0]
        threads = max(threads, threading.active_count())
    wall = time.perf_counter() - wall
    commits_turn = (commits() - commits0) / turns
    cpu, own = time.process_time() - cpu, time.thread_time() - own
    per_thread = _per_thread(base, 1 / turns)
    close()
    ms = 1e3 / turns
    return (
        per_thread
        | {"threads_started": STARTED[0] / turns}
        | {
            "wall_ms": wall * ms,
            "cpu_ms": cpu * ms,
            "caller_cpu_ms": own * ms,
            "others_cpu_ms": (cpu - own) * ms,
            "caller_off_cpu_ms": (wall - own) * ms,
            "caller_asleep_ms": (wall - own) * ms - per_thread.get("runq[caller]", 0.0),
            "writes_turn": (counting.writes - writes0) / turns,
            "commits_turn": commits_turn,
            "tail_ms": tail * ms,
            "threads": threads,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--skip", type=int, default=0, help="turns run before the window")
    parser.add_argument("--only", choices=("sk", "sqlite", *VARIANTS))
    parser.add_argument("--also", nargs="*", default=[], choices=list(VARIANTS))
    args = parser.parse_args()
    _watch_threads()
    with tempfile.TemporaryDirectory(prefix="bench-lg-wall-") as tmp_dir:
        tmp = Path(tmp_dir)
        if args.only:
            run(args.only, tmp, 3)  # warm-up: imports, first graph
            print(run(args.only, tmp, args.turns, args.skip))
            return
        kinds = ["sk", "sqlite", *args.also]
        for kind in kinds:
            run(kind, tmp, 3)
        results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for i in range(args.rounds):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                results[kind].append(run(kind, tmp, args.turns, args.skip))
    keys = list(dict.fromkeys(k for kind in kinds for k in results[kind][0]))
    print(f"{'per turn':22}" + "".join(f" {kind:>24}" for kind in kinds))
    for key in keys:
        cells = []
        for kind in kinds:
            vs = sorted(r.get(key, 0.0) for r in results[kind])
            cells.append(f"{vs[len(vs) // 2]:.3f} [{vs[0]:.3f}..{vs[-1]:.3f}]")
        print(f"{key:22}" + "".join(f" {cell:>24}" for cell in cells))
    for kind in kinds:
        if kind != "sqlite":
            ratios = sorted(
                q["wall_ms"] / s["wall_ms"]
                for s, q in zip(results[kind], results["sqlite"], strict=True)
            )
            spread = f"[{ratios[0]:.2f}..{ratios[-1]:.2f}]"
            print(f"writes/s ratio {kind}/sqlite: {ratios[len(ratios) // 2]:.2f} {spread}")


if __name__ == "__main__":
    main()
