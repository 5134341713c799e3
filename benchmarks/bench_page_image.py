"""The page reader's own work in a full page backup: the plan, the pages read and the
plan applied to them (``PageSnapshot.plan`` + ``chunks``: free pages zeroed, the
unused bytes of b-tree and overflow pages zeroed), alone, per ``--tree``.

Each ``--tree`` (a ``src`` folder) runs in a child process, alternated for ``--rounds``:
the CPU seconds of the reading thread (``time.thread_time``, the image's SHA-256 left
out) and the image's SHA-256, which must be the same for every tree (the image is
byte for byte the same). ``--callgrind``: once per tree under callgrind instead, the
instructions of the same window (``callgrind_window.py``: deterministic, unlike CPU
time on a loaded machine). ``--digests``: every page's digest taken too (the page
pass does it in a tree that has one, backupc). The store is opened by a plain connection for the run
(a page snapshot needs its WAL index).

    python benchmarks/bench_page_image.py /tmp/b15/store.db --rounds 5 \\
        --tree src --tree /tmp/main-src
    python benchmarks/bench_page_image.py /tmp/b15/store.db --callgrind \\
        --tree src --tree /tmp/main-src
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHUNK = 8 << 20


def child(db: str, tree: str, window: str | None, digests: bool = False) -> dict[str, object]:
    sys.path.insert(0, tree)
    import inspect

    from statekeeper.backends.sqlite import pages as sqlite_pages
    from statekeeper.governance.backup.pagedelta import page_digests

    keep = sqlite3.connect(db)
    keep.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the WAL index
    snapshot = sqlite_pages.open_snapshot(db, 5.0)
    assert snapshot is not None, f"{db}: not a SQLite store in WAL mode"
    held: list[bytearray] = []

    def spare(n: int) -> bytearray | None:  # one buffer again and again, as the backup
        return held.pop() if held and len(held[-1]) == n else None

    digest = hashlib.sha256()
    lib = ctypes.CDLL(window) if window else None
    try:
        if lib is not None:
            lib.cg_start()
        start = time.thread_time()
        aside = 0.0
        snapshot.plan()
        # --digests: every page's digest too, in the page pass where the tree takes it
        # there (backupc), else as the sealing threads did (page_digests per chunk)
        one_pass = digests and "seed" in inspect.signature(snapshot.chunks).parameters
        seed = 7 if one_pass else None
        for piece in (
            snapshot.chunks(CHUNK, spare, seed) if one_pass else snapshot.chunks(CHUNK, spare)
        ):
            if digests and not one_pass:
                page_digests(piece, snapshot.page_size, 7)
            if lib is None:
                mark = time.thread_time()
                digest.update(piece)
                aside += time.thread_time() - mark
            held[:] = [piece]
        cpu = time.thread_time() - start - aside
        if lib is not None:
            lib.cg_stop()
    finally:
        snapshot.close()
        keep.close()
    return {"cpu": cpu, "sha256": digest.hexdigest(), "module": sqlite_pages.__file__}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", action="append", help="a src folder (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--callgrind", action="store_true", help="instructions, once per tree")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--window", help=argparse.SUPPRESS)
    parser.add_argument("--digests", action="store_true", help="the page digests too")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.db, args.child, args.window, args.digests)))
        return
    trees = [str(Path(t).resolve()) for t in args.tree or ["src"]]
    report: dict[str, object] = {}
    if args.callgrind:
        sys.path.insert(0, str(HERE))
        from callgrind_window import helper, run_window

        out = Path(tempfile.mkdtemp(prefix="sk-page-image-"))
        lib = str(helper(out))
        for n, tree in enumerate(trees):
            script_args = [args.db, "--child", tree, "--window", lib]
            script_args += ["--digests"] if args.digests else []
            report[tree] = {"instructions": run_window(__file__, script_args, out, f"t{n}")}
        print(json.dumps(report, indent=2))
        return
    runs: dict[str, list[dict[str, object]]] = {t: [] for t in trees}
    loads = [os.getloadavg()[0]]
    for round_no in range(args.rounds):
        for tree in trees if round_no % 2 == 0 else trees[::-1]:
            out_text = subprocess.run(
                [sys.executable, __file__, args.db, "--child", tree]
                + (["--digests"] if args.digests else []),
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs[tree].append(json.loads(out_text.strip().splitlines()[-1]))
        loads.append(os.getloadavg()[0])
    images = {str(r["sha256"]) for got in runs.values() for r in got}
    report["loadavg_1min_during"] = [round(x, 1) for x in loads]
    report["same_image"] = len(images) == 1
    for tree, got in runs.items():
        cpu = sorted(float(str(r["cpu"])) for r in got)
        report[tree] = {
            "cpu_s_min": round(cpu[0], 3),
            "cpu_s_median": round(statistics.median(cpu), 3),
            "cpu_s_max": round(cpu[-1], 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
