"""Where the instructions of a cold ``get_tuple`` of the latest checkpoint go: one read of
a new ``StatekeeperSaver`` (a second saver of the process: imports and class caches
warm, as in ``bench_langgraph_goals.py``'s cold reads), cut into parts by callgrind
dumps at the entry and exit of the store's and the saver's steps (issue 12; the
section "lgcold" of docs/benchmarks.md).

On ``bench_langgraph_cold_callgrind.py``'s files (``write DIR`` first)::

    .venv/bin/python benchmarks/bench_langgraph_cold_callgrind.py write /tmp/cg
    .venv/bin/python benchmarks/bench_langgraph_cold_parts.py /tmp/cg

Parts: ``head read`` (the engine's one statement: head, latest snapshot, events after
it), ``snapshot`` (its verify, decompress and parse), ``events`` (each event's verify,
decompress and parse), ``fold`` (their ops applied; the Python loop between
the events' decodes counts in ``rest``), ``messages`` (``_tuple``: the
checkpoint and its messages built), ``rest`` (everything between them: the portal,
the saver's and the store's own steps). ``--gc-off``: the same read with the cyclic
GC off (its share is the difference). ``PYTHONPATH=<another tree's src>`` measures
another tree on the same files.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_langgraph_goals as goals

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_dump(const char *s) { CALLGRIND_DUMP_STATS_AT(s); }
void cg_stop(void) { CALLGRIND_DUMP_STATS_AT("exit:rest"); CALLGRIND_STOP_INSTRUMENTATION; }
"""

#: the part each wrapped step's own instructions count in
PARTS = {
    "state_now": "head read",
    "decode_snapshot": "snapshot",
    "decode_event": "events",
    "apply_events": "fold",
    "_tuple": "messages",
}


def _helper(out: Path) -> Any:
    lib = out / "cgparts.so"
    if not lib.exists():
        src = out / "cgparts.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib))


def child(out: Path, gc_off: bool) -> None:
    from statekeeper.codec.pipeline import Codec
    from statekeeper.integrations.langgraph.saver import StatekeeperSaver
    from statekeeper.store.body import SNAPSHOT_TYPE
    from statekeeper.store.reads import ReadPath

    window = _helper(out)
    on = False

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def step(*args: Any, **kwargs: Any) -> Any:
            if on:  # the instructions before this step count in "rest"
                window.cg_dump(b"exit:rest")
            try:
                return fn(*args, **kwargs)
            finally:
                if on:
                    window.cg_dump(f"exit:{name}".encode())

        return step

    decode = Codec.decode_typed

    @functools.wraps(decode)
    def decode_typed(self: Codec, agent_id: str, seq: int, record_type: str, *a: Any) -> Any:
        name = "decode_snapshot" if record_type == SNAPSHOT_TYPE else "decode_event"
        return timed(name, decode)(self, agent_id, seq, record_type, *a)

    Codec.decode_typed = decode_typed  # type: ignore[method-assign]
    ReadPath.apply_events = timed("apply_events", ReadPath.apply_events)  # type: ignore[method-assign]
    StatekeeperSaver._tuple = timed("_tuple", StatekeeperSaver._tuple)  # type: ignore[method-assign]
    for last in (False, True):
        saver, close = goals.SAVERS["sk"](out / "sk.db", "NORMAL")
        saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
        reads = saver.store._reads
        reads.current_now("absent")  # (binds the engine's inline read)
        reads.state_now = timed("state_now", reads.state_now)
        reads._state_of = reads.backend
        gc.collect()
        if gc_off:
            gc.disable()
        if last:
            on = True
            window.cg_start()
        found = saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})
        if last:
            window.cg_stop()
            on = False
        gc.enable()
        assert found is not None
        del found
        close()
        del saver, close


def run(out: Path, gc_off: bool) -> dict[str, int]:
    prefix = out / "parts.out"
    for old in out.glob("parts.out.*"):
        old.unlink()
    _helper(out)
    args = ["child", str(out)] + (["--gc-off"] if gc_off else [])
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={prefix}.%p",
            sys.executable,
            __file__,
            *args,
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    parts: dict[str, int] = defaultdict(int)
    for dump in out.glob("parts.out.*.*"):  # one file per dump: "<prefix>.<pid>.<n>"
        trigger, total = "", 0
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger:"):
                trigger = line.rpartition(":")[2].strip()
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                break
        if trigger and total < 2**63:  # (a dump after the window may underflow)
            parts[PARTS.get(trigger, trigger)] += total
    return dict(parts)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(Path(sys.argv[2]), "--gc-off" in sys.argv)
        return
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    out = Path(sys.argv[1])
    parts = run(out, "--gc-off" in sys.argv)
    total = sum(parts.values())
    print("| part | instructions | share |\n|---|---|---|")
    for name in ("head read", "snapshot", "events", "fold", "messages", "rest"):
        count = parts.get(name, 0)
        print(f"| {name} | {count:,} | {count / total:.1%} |")
    print(f"| total | {total:,} | |")


if __name__ == "__main__":
    main()
