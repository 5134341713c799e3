"""What keeping a load's replay to a few events costs a save (callgrind: instructions
counted only around the saves), against what it saves a load: issue 11's "the head
state kept materialised where that is cheaper".

A chat of ~300-character messages (``bench_coldload.py``'s) is saved up to 100
messages, then 64 more saves (one message each) are counted, for each
``snapshot_every``: the default (``"bounded"``), and 16, 8, 4 and 1 (1: every save
writes the whole state, the head kept materialised as a snapshot row). Printed per
save: instructions, and the stored bytes (events + snapshots) the 64 saves added; the
peer's ``SqliteSaver.put`` of the same documents for reference::

    .venv/bin/python benchmarks/bench_snapshot_price.py /tmp/cg-price
    .venv/bin/python benchmarks/bench_snapshot_price.py --wall FULL 3   # sync, rounds

``--wall``: the same 64 saves at ``synchronous=FULL`` (or ``NORMAL``) on real files,
every policy and the peer in one process, the order rotating per save; per round the
saves per second and CPU per save of each side, and each side's rate over the peer's.

A load replays at most ``snapshot_every - 1`` events; what one replayed event costs
a load is ``bench_coldload_window.py``'s (``sk99`` − ``sk0``) / 99.
"""

from __future__ import annotations

import asyncio
import ctypes
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open, lg_plan, make_messages
from callgrind_window import helper, run_window
from statekeeper import StateStore

EVERY: tuple[Any, ...] = ("bounded", 16, 8, 4, 1)
BASE, COUNTED = 100, 64


def stored(path: Path) -> int:
    """Stored bytes of every event and snapshot payload in ``path``."""
    with sqlite3.connect(path) as conn:
        ev = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM sk_events").fetchone()
        sn = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM sk_snapshots").fetchone()
    return int(ev[0]) + int(sn[0])


async def child(out: Path, mode: str) -> None:
    window = ctypes.CDLL(str(helper(out)))
    msgs = make_messages(BASE + COUNTED, seed=7, chars=300)
    docs = [{"messages": msgs[: i + 1]} for i in range(BASE + COUNTED)]
    path = out / f"{mode}.db"
    path.unlink(missing_ok=True)
    if mode == "lg":
        saver = lg_open(path, "OFF")
        plan = lg_plan(saver, docs)
        cfg = lg_config("a")
        for cp, meta, versions in plan[:BASE]:
            cfg = saver.put(cfg, cp, meta, versions)
        window.cg_start()
        for cp, meta, versions in plan[BASE:]:
            cfg = saver.put(cfg, cp, meta, versions)
        window.cg_stop()
        saver.conn.close()
        return
    every: Any = int(mode) if mode.isdigit() else mode
    url = f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, snapshot_every=every, witness=False) as store:
        for doc in docs[:BASE]:
            await store.save("a", doc)
        before = stored(path)
        window.cg_start()
        for doc in docs[BASE:]:
            await store.save("a", doc)
        window.cg_stop()
    (out / f"{mode}.bytes").write_text(str(stored(path) - before))


async def wall(sync: str, rounds: int) -> None:
    """``--wall``: every side's 64 saves interleaved, ``rounds`` times."""
    import tempfile
    import time

    msgs = make_messages(BASE + COUNTED, seed=7, chars=300)
    docs = [{"messages": msgs[: i + 1]} for i in range(BASE + COUNTED)]
    sides = (*map(str, EVERY), "lg")
    print(f"| round | {' | '.join(sides)} |")
    print(f"|---|{'---|' * len(sides)}")
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="sk-price-") as d:
            stores = {
                m: StateStore(
                    f"sqlite:///{d}/{m}.db?synchronous={sync}",
                    snapshot_every=int(m) if m.isdigit() else m,
                    witness=False,
                    durability="sync",
                )
                for m in sides[:-1]
            }
            saver = lg_open(Path(d, "lg.db"), sync)
            plan = lg_plan(saver, docs)
            cfg = lg_config("a")
            for i, doc in enumerate(docs[:BASE]):
                for store in stores.values():
                    await store.save("a", doc)
                cp, meta, versions = plan[i]
                cfg = saver.put(cfg, cp, meta, versions)
            spent = {m: 0.0 for m in sides}
            cpu = {m: 0.0 for m in sides}
            for i in range(BASE, BASE + COUNTED):
                for m in sides[i % len(sides) :] + sides[: i % len(sides)]:
                    c0, t0 = time.process_time(), time.perf_counter()
                    if m == "lg":
                        cp, meta, versions = plan[i]
                        cfg = saver.put(cfg, cp, meta, versions)
                    else:
                        await stores[m].save("a", docs[i])
                    spent[m] += time.perf_counter() - t0
                    cpu[m] += time.process_time() - c0
            for store in stores.values():
                await store.close()
            saver.conn.close()
        cells = [
            f"{COUNTED / spent[m]:.0f}/s {1e6 * cpu[m] / COUNTED:.0f} us"
            f" {spent['lg'] / spent[m]:.2f}x"
            for m in sides
        ]
        print(f"| {r} | {' | '.join(cells)} |")


def main() -> None:
    if sys.argv[1] == "--wall":
        asyncio.run(wall(sys.argv[2], int(sys.argv[3])))
        return
    if sys.argv[1] == "child":
        asyncio.run(child(Path(sys.argv[2]), sys.argv[3]))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    print("| snapshot_every | instructions per save | stored bytes per save |")
    print("|---|---|---|")
    for mode in (*map(str, EVERY), "lg"):
        total = run_window(__file__, ["child", str(out), mode], out, f"cg-{mode}")
        bytes_file = out / f"{mode}.bytes"
        per = f"{int(bytes_file.read_text()) // COUNTED:,}" if bytes_file.exists() else "(peer)"
        print(f"| {mode} | {total // COUNTED:,} | {per} |")


if __name__ == "__main__":
    main()
