"""Instructions per cold ``get_tuple`` (``bench_langgraph_older.py``'s 200-turn chat),
for callgrind: load-independent numbers for issue 12's read goals.

``write DIR``: the chat through each saver (``DIR/sk.db``, ``DIR/sqlite.db``, and
``DIR/older.json``: the older checkpoint ids per saver, at 1/8 .. 7/8 of the history).
``read KIND DIR WHICH N``: N new savers of ``KIND`` (``sk`` or ``sqlite``) on the file,
each opened by a read of an absent thread, then (``WHICH``) reading the ``latest``
checkpoint, or the latest then the 4th ``older`` one (the older read counted: subtract
a ``latest`` run of the same N). Instructions per read = (I(N=3) − I(N=0)) / 3::

    .venv/bin/python benchmarks/bench_langgraph_cold_callgrind.py write /tmp/cg
    for n in 0 3; do PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg/sk-latest-$n.out .venv/bin/python \\
        benchmarks/bench_langgraph_cold_callgrind.py read sk /tmp/cg latest $n; done
    callgrind_annotate /tmp/cg/sk-latest-3.out | grep 'PROGRAM TOTALS'

``--all DIR`` runs every combination under valgrind and prints the table (~20 min on
an idle 2-core machine). To measure another tree, run the ``read`` steps with
``PYTHONPATH=<its src>`` on files it wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_langgraph_goals as goals
import bench_langgraph_older as older


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ids = {kind: older.write_chat(kind, out / f"{kind}.db", 200) for kind in goals.SAVERS}
    (out / "older.json").write_text(json.dumps(ids))


def read(kind: str, out: Path, which: str, n: int) -> None:
    cid = json.loads((out / "older.json").read_text())[kind][3]
    for _ in range(n):
        saver, close = goals.SAVERS[kind](out / f"{kind}.db", "NORMAL")
        saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
        assert saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})
        if which == "older":
            conf = {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": cid}
            assert saver.get_tuple({"configurable": conf})
        close()


def _instructions(kind: str, out: Path, which: str, n: int) -> int:
    dump = out / f"{kind}-{which}-{n}.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={dump}",
            sys.executable,
            __file__,
            "read",
            kind,
            str(out),
            which,
            str(n),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    text = subprocess.run(
        ["callgrind_annotate", str(dump)], check=True, capture_output=True, text=True
    ).stdout
    found = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", text) or re.search(
        r"([\d,]+)\s+PROGRAM TOTALS", text
    )
    assert found, text[:2000]
    return int(found.group(1).replace(",", ""))


def run_all(out: Path) -> None:
    if not (out / "older.json").exists():
        write(out)
    counts = {
        (kind, which, n): _instructions(kind, out, which, n)
        for kind in goals.SAVERS
        for which, n in (("latest", 0), ("latest", 3), ("older", 3))
    }
    for kind in goals.SAVERS:
        base = counts[(kind, "latest", 0)]
        latest = (counts[(kind, "latest", 3)] - base) / 3
        both = (counts[(kind, "older", 3)] - base) / 3
        print(
            f"{kind:7} cold latest {latest / 1e6:6.1f} M instructions, then older"
            f" {(both - latest) / 1e6:6.1f} M"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    if sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif sys.argv[1] == "read":
        read(sys.argv[2], Path(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "--all":
        run_all(Path(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
