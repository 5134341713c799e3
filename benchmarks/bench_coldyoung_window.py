"""Instructions of one cold load of a *young* agent (saved 20, 40 or 56 times: under the
default policy, before this branch, no snapshot at all), statekeeper against
``SqliteSaver.get_tuple`` of the same chat (callgrind, counted only around the loads:
``bench_coldtail_window.py``'s window and loads; docs/benchmarks.md, "coldyoung").

Agent ``k<N>`` is saved N times (the chat of ``bench_coldtail_window.py``: ~300-character
messages, one more a save). The statekeeper file is built by the tree measured
(``PYTHONPATH``); the peer's is the same for every tree::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_coldyoung_window.py build /tmp/y
    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_coldyoung_window.py run /tmp/y sk40
    .venv/bin/python benchmarks/bench_coldyoung_window.py run /tmp/y lg40
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages
from bench_coldtail_window import N, measure
from callgrind_window import run_window
from statekeeper import StateStore

SAVES = (7, 8, 20, 40, 56)


async def build(out: Path) -> None:
    """The statekeeper file (``p.db``, default policy) and, once, the peer's (``lg.db``)."""
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before anything is measured)
    msgs = make_messages(max(SAVES), seed=7, chars=300)
    (out / "p.db").unlink(missing_ok=True)
    async with StateStore(f"sqlite:///{out}/p.db?synchronous=OFF", witness=False) as store:
        for n in SAVES:
            for i in range(n):
                await store.save(f"k{n}", {"messages": msgs[: i + 1]})
    with sqlite3.connect(out / "p.db") as conn:
        for n in SAVES:
            rows = conn.execute(
                "SELECT count(*) FROM sk_snapshots WHERE agent_id = ?", (f"k{n}",)
            ).fetchone()
            print(f"k{n}: {rows[0]} snapshot rows")
    if (out / "lg.db").exists():
        return
    saver = lg_open(out / "lg.db", "OFF")
    for n in SAVES:
        cfg = lg_config(f"k{n}")
        docs = [{"messages": msgs[: i + 1]} for i in range(n)]
        for cp, meta, versions in lg_plan(saver, docs):
            cfg = saver.put(cfg, cp, meta, versions)
    saver.conn.close()


def main() -> None:
    cmd, out = sys.argv[1], Path(sys.argv[2])
    if cmd == "build":
        asyncio.run(build(out))
    elif cmd == "child":
        asyncio.run(measure(sys.argv[3], out))
    elif cmd == "run":
        total = run_window(__file__, ["child", str(out), sys.argv[3]], out, f"cg-{sys.argv[3]}")
        print(f"{sys.argv[3]} {total // N}")


if __name__ == "__main__":
    main()
