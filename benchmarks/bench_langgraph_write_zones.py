"""Where a LangGraph run's instructions go, by zone: the graph, each saver call, and
inside the calls the store's append, its statement, the run's release (callgrind,
every thread; issue 12).

``bench_langgraph_turn_calls.py`` cuts a chat turn at the saver's three calls only. Here
the cuts are finer, and both workloads of ``bench_langgraph_goals.py`` are covered:
``CALLGRIND_DUMP_STATS_AT`` at every entry to and exit from a zone charges what ran
since the last cut to the innermost zone open then (the graph when none is). Zones:

* both savers: ``get_tuple``, ``put``, ``put_writes`` (the public calls);
* statekeeper: ``release`` (the run's end: its claim released, ``_end_run``),
  ``lean`` (the store's lean keyed append, ``store/lean.py``, its statement excluded),
  ``append`` (the store's general append, ``StateStore.append``, the same),
  ``statement`` (the engine's ``commit_keyed`` and ``append``: the SQLite statements),
  ``snapshot`` (``StateStore.snapshot``);
* ``SqliteSaver``: ``serde`` (its serializer's ``dumps_typed``).

Instructions per run (small: one 30-step invoke on a new thread; chat: one turn), after
warm-up runs outside the window::

    .venv/bin/python benchmarks/bench_langgraph_write_zones.py run sk small 3 /tmp/wz
    .venv/bin/python benchmarks/bench_langgraph_write_zones.py run sqlite small 3 /tmp/wz
    .venv/bin/python benchmarks/bench_langgraph_write_zones.py run sk chat 5 /tmp/wz 10

(the last argument: warm-up turns of the chat, default 2). ``sk`` runs the saver's
defaults but ``writes_wait`` 1 s (as ``sk-held`` of ``bench_langgraph_write_window.py``:
no held write times out under callgrind's slowdown). Set ``CG_PASS_EVERY=0.05`` (see
``callgrind_window.py``) for the case mix of an unslowed process.
``PYTHONPATH=<another tree's src>`` measures another tree.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import random
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import slowed_clock

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_part(const char* label) { CALLGRIND_DUMP_STATS_AT(label); }
void cg_stop(void) { CALLGRIND_DUMP_STATS_AT("graph"); CALLGRIND_STOP_INSTRUMENTATION; }
"""
ORDER = (
    "graph",
    "get_tuple",
    "put",
    "put_writes",
    "release",
    "lean",
    "append",
    "statement",
    "snapshot",
    "serde",
)


class Zones:
    """The open zones (innermost last) and the cut made at each entry and exit."""

    def __init__(self, cg: Any) -> None:
        self.cg = cg
        self.lock = threading.Lock()
        self.open: list[str] = []
        self.active = False
        self.entered: Counter[str] = Counter()

    def cut(self) -> None:
        self.cg.cg_part((self.open[-1] if self.open else "graph").encode())

    def enter(self, name: str) -> None:
        with self.lock:
            self.cut()
            self.open.append(name)
            self.entered[name] += 1

    def leave(self, name: str) -> None:
        with self.lock:
            self.cut()
            # the innermost zone of that name (calls on threads may overlap)
            for i in range(len(self.open) - 1, -1, -1):
                if self.open[i] == name:
                    del self.open[i]
                    break

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        zones = self
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapped(*a: Any, **k: Any) -> Any:
                if not zones.active:
                    return await fn(*a, **k)
                zones.enter(name)
                try:
                    return await fn(*a, **k)
                finally:
                    zones.leave(name)

            return awrapped

        @functools.wraps(fn)
        def wrapped(*a: Any, **k: Any) -> Any:
            if not zones.active:
                return fn(*a, **k)
            zones.enter(name)
            try:
                out = fn(*a, **k)
            finally:
                zones.leave(name)
            return out

        return wrapped


#: zone entries made at the end of the window to measure what one costs
CALIBRATE = 500


def helper(out: Path) -> Path:
    lib = out / "cgzones.so"
    if not lib.exists():
        src = out / "cgzones.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def _patch_statekeeper(zones: Zones) -> None:
    """Class-level zones, before any saver or store is made (bound methods are taken
    when the store binds its lean append)."""
    from statekeeper.backends import sqlite as engine
    from statekeeper.integrations.langgraph.saver import StatekeeperSaver
    from statekeeper.store import writes
    from statekeeper.store.store import StateStore

    backend = engine.SQLiteBackend
    for name in ("commit_keyed", "append"):
        setattr(backend, name, zones.wrap("statement", getattr(backend, name)))
    StateStore.append = zones.wrap("append", StateStore.append)  # type: ignore[method-assign]
    StateStore.snapshot = zones.wrap("snapshot", StateStore.snapshot)  # type: ignore[method-assign]
    StatekeeperSaver._end_run = zones.wrap("release", StatekeeperSaver._end_run)  # type: ignore[method-assign]
    bind = writes.bind_lean

    def bind_lean(pipeline: Any) -> Any:
        lean = bind(pipeline)
        if lean is None:
            return None
        wrapped = zones.wrap("lean", lean)

        def lean_zone(*a: Any) -> Any:
            done = wrapped(*a)
            if done is None or not inspect.isawaitable(done):
                return done
            return zones.wrap("lean", _awaited)(done)

        return lean_zone

    writes.bind_lean = bind_lean  # type: ignore[attr-defined]


async def _awaited(done: Any) -> Any:
    return await done


def measure(kind: str, workload: str, runs: int, out: Path, warm: int) -> None:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import chat_graph, small_graph, sqlite_saver

    slowed_clock()
    zones = Zones(ctypes.PyDLL(str(helper(out))))  # (PyDLL: the GIL kept across a cut)
    tmp = Path(tempfile.mkdtemp(dir=out))
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "w.db", "NORMAL")
        saver.serde.dumps_typed = zones.wrap("serde", saver.serde.dumps_typed)
    else:
        _patch_statekeeper(zones)
        from statekeeper.integrations.langgraph.commits import _SaverCommits

        # a parked write's wait (for the run's next commit) is the graph's time
        _SaverCommits._wait_parked = zones.wrap("graph", _SaverCommits._wait_parked)  # type: ignore[method-assign]
        from statekeeper.integrations.langgraph import StatekeeperSaver

        url = f"sqlite:///{tmp / 'w.db'}?synchronous=NORMAL"
        sk = StatekeeperSaver.from_url(url, writes_wait=1.0)
        saver, close = sk, sk.close
    for name in ("get_tuple", "put", "put_writes"):
        setattr(saver, name, zones.wrap(name, getattr(saver, name)))
    if workload == "chat":
        graph = chat_graph().compile(checkpointer=saver)
    else:
        graph = small_graph(30).compile(checkpointer=saver)
    for t in range(warm + runs):
        if t == warm:
            zones.active = True
            zones.cg.cg_start()
        if workload == "chat":
            message = HumanMessage(text(random.Random(-t), 300), id=f"h-{t}")
            cfg: Any = {"configurable": {"thread_id": "chat"}}
            graph.invoke({"messages": [message]}, cfg, durability="sync")
        else:
            cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
            graph.invoke({"n": 0}, cfg, durability="sync")
    entered = dict(zones.entered)
    for _ in range(CALIBRATE):  # what a zone's own cuts cost (see run)
        zones.enter("calibrate")
        zones.leave("calibrate")
    zones.cg.cg_stop()
    zones.active = False
    close()
    (out / f"zones-{kind}-{workload}.entered").write_text(repr(entered))


def run(kind: str, workload: str, runs: int, out: Path, warm: int) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    helper(out)
    name = f"zones-{kind}-{workload}"
    for old in out.glob(f"{name}.*"):
        old.unlink()
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out / name}.%p",
            sys.executable,
            __file__,
            "measure",
            kind,
            workload,
            str(runs),
            str(out),
            str(warm),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    parts: Counter[str] = Counter()
    for dump in out.glob(f"{name}.*"):
        label, count = None, None
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.rsplit(": ", 1)[1]
            elif line.startswith(("totals:", "summary:")) and count is None:
                count = int(line.split()[1])
        if label is not None and count is not None and count < 2**63:
            parts[label] += count
    return dict(parts)


def main() -> None:
    if sys.argv[1] == "measure":
        measure(sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]), int(sys.argv[6]))
    elif sys.argv[1] == "run":
        warm = int(sys.argv[6]) if len(sys.argv) > 6 else 2
        kind, workload, runs, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
        parts = run(kind, workload, runs, out, warm)
        entered = eval((out / f"zones-{kind}-{workload}.entered").read_text())
        # a zone entry's own cost: half inside the zone (the enter's cut to the
        # leave's), half outside; the calibration's outside half lands in "graph"
        pair = parts.pop("calibrate", 0) / CALIBRATE
        parts["graph"] = parts.get("graph", 0) - pair * CALIBRATE
        print(f"a zone entry costs ~{2 * pair:,.0f} instructions (inside ~{pair:,.0f})")
        print(f"{'zone':11} {'per run':>14} {'entries':>8}")
        for k in (*ORDER, *sorted(set(parts) - set(ORDER))):
            if k in parts:
                n = entered.get(k, 0) / runs
                print(f"{k:11} {parts[k] / runs:>14,.0f} {n:>8.1f}")
        total = sum(parts.values()) / runs
        cuts = sum(entered.values()) / runs
        bare = total - cuts * 2 * pair
        print(f"{'run':11} {total:>14,.0f}  (less the entries' own cost: ~{bare:,.0f})")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
