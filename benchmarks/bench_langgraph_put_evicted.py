"""Instructions of one sync ``put`` whose thread stays cached, and of one whose
thread's view was evicted from the saver's cache since its last turn (callgrind,
``CALLGRIND_TOGGLE_COLLECT`` around the puts, as ``bench_langgraph_put_thread.py``).

``cached``: ``PUTS`` checkpoints put one after the other on one thread. ``evicted``:
two threads take turns with ``cache_size=1``, so every ``put`` reads its thread
again (the count of its next snapshot carried on from the store's record: the branch
"lgtimers"). ``snapshot_min_bytes`` small (1 KiB): the threads are snapshotted along
the way; ``nosnap`` after the directory: never (``snapshot_min_bytes`` 1 TB), the
put's own path alone. SQLite ``NORMAL``, ``fork_protection=False``; a state of one
short string::

    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_put_evicted.py run cached 200 /tmp/x
    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_put_evicted.py run evicted 200 /tmp/x

prints the instructions per ``put`` and the snapshots taken. Compare two trees by
``PYTHONPATH`` (benchmarks/_common.py lets it win), rounds interleaved.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from bench_langgraph_put_thread import helper

WARM = 20


def puts(kind: str, n: int, out: Path, nosnap: bool) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from statekeeper.integrations.langgraph import StatekeeperSaver

    toggle = ctypes.CDLL(str(helper(out))).cg_toggle
    tmp = Path(tempfile.mkdtemp(dir=out))
    url = f"sqlite:///{tmp / 'put.db'}?synchronous=NORMAL"
    saver = StatekeeperSaver.from_url(
        url, fork_protection=False, cache_size=1, snapshot_min_bytes=10**12 if nosnap else 1024
    )
    snapshots = [0]
    snapshot = saver.store.snapshot

    async def counted(agent_id: str) -> int:
        snapshots[0] += 1
        return await snapshot(agent_id)

    saver.store.snapshot = counted  # type: ignore[method-assign]
    threads = ["a", "b"] if kind == "evicted" else ["a"]
    configs: dict[str, Any] = {
        t: {"configurable": {"thread_id": t, "checkpoint_ns": ""}} for t in threads
    }
    for step in range(WARM + n):
        if step == WARM:
            toggle()
        thread = threads[step % len(threads)]
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": f"value {step} " * 8}
        checkpoint["channel_versions"] = {"n": step + 1}
        meta: Any = {"source": "loop", "step": step}
        configs[thread] = saver.put(configs[thread], checkpoint, meta, {"n": step + 1})
    toggle()
    print(snapshots[0])
    saver.close()


def run(kind: str, n: int, out: Path, nosnap: bool) -> tuple[float, int]:
    out.mkdir(parents=True, exist_ok=True)
    helper(out)
    dump = out / f"put-evicted-{kind}.out"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--callgrind-out-file={dump}",
            sys.executable,
            __file__,
            "puts",
            kind,
            str(n),
            str(out),
            *(["nosnap"] if nosnap else []),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
    )
    snapshots = int(done.stdout.split()[-1])
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1]) / n, snapshots
    raise SystemExit(f"no totals in {dump}")


def main() -> None:
    cmd = sys.argv[1]
    nosnap = sys.argv[5:] == ["nosnap"]
    if cmd == "puts":
        puts(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), nosnap)
    elif cmd == "run":
        per_put, snapshots = run(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), nosnap)
        print(f"{per_put:,.0f} instructions a put, {snapshots} snapshots")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
