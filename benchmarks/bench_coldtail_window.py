"""Instructions of one cold load wherever the head sits, under ``snapshot_every=100`` and
under the default policy (``"bounded"``), statekeeper against ``SqliteSaver.get_tuple``
(callgrind, counted only around the loads: ``callgrind_window.py``'s helper); what tail
snapshots (store/tails.py, docs/benchmarks.md "coldtail") change.

``bench_coldload_window.py``'s chat (~300-character messages, one more per save): agent
``k<K>`` is saved 100 + K times, so its head sits K events past the snapshot at 100 under
``snapshot_every=100`` (under the default the whole snapshots of this chat fall at 59, 122
and 189). The file is built by the tree measured (``PYTHONPATH``), so a tree that writes
tail snapshots is measured on its own file; the peer's file is the same for every tree::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_coldtail_window.py build /tmp/w 100
    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_coldtail_window.py run /tmp/w sk50
    .venv/bin/python benchmarks/bench_coldtail_window.py run /tmp/w lg50

(``build <dir> bounded`` for the default policy.) ``save <dir> <policy>``: instructions of
64 saves of the chat from 100 to 164 messages, per save, and the bytes they stored.
``cpu <dir> sk0 lg0 ...``: CPU per load by ``time.thread_time`` (best of 7), no valgrind.
"""

from __future__ import annotations

import asyncio
import ctypes
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_loads_in_window, lg_open, lg_plan, make_messages
from callgrind_window import helper, run_window
from statekeeper import StateStore

HEADS = (0, 1, 8, 10, 21, 50, 88, 99)
#: loads counted per mode (per load = the window's total / N)
N = 100


def _every(policy: str) -> Any:
    return int(policy) if policy.isdigit() else policy


async def build(out: Path, policy: str) -> None:
    """The statekeeper file (``p.db``) and, once, the peer's (``lg.db``) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before anything is measured)
    msgs = make_messages(200, seed=7, chars=300)
    url = f"sqlite:///{out}/p.db?synchronous=OFF"
    async with StateStore(url, snapshot_every=_every(policy), witness=False) as store:
        for k in HEADS:
            for i in range(100 + k):
                await store.save(f"k{k}", {"messages": msgs[: i + 1]})
    if (out / "lg.db").exists():
        return
    saver = lg_open(out / "lg.db", "OFF")
    for k in HEADS:
        cfg = lg_config(f"k{k}")
        docs = [{"messages": msgs[: i + 1]} for i in range(100 + k)]
        for cp, meta, versions in lg_plan(saver, docs):
            cfg = saver.put(cfg, cp, meta, versions)
    saver.conn.close()


async def measure(mode: str, out: Path) -> None:
    """``N`` cold loads of ``mode`` (``sk<K>`` / ``lg<K>``) inside the window."""
    window = ctypes.CDLL(str(helper(out)))
    if mode.startswith("lg"):
        lg_loads_in_window(out / "lg.db", f"k{mode[2:]}", N, window)
        return
    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    agent = f"k{mode[2:]}"
    for _ in range(5):
        await store.load(agent)
    window.cg_start()
    for _ in range(N):
        await store.load(agent)
    window.cg_stop()
    await store.close()


async def saves(out: Path, policy: str) -> None:
    """64 saves of the chat from 100 to 164 messages inside the window."""
    window = ctypes.CDLL(str(helper(out)))
    msgs = make_messages(164, seed=7, chars=300)
    path = out / f"save-{policy}.db"
    path.unlink(missing_ok=True)
    async with StateStore(
        f"sqlite:///{path}?synchronous=OFF", snapshot_every=_every(policy), witness=False
    ) as store:
        for i in range(100):
            await store.save("a", {"messages": msgs[: i + 1]})
        with sqlite3.connect(path) as conn:
            before = _stored(conn)
        window.cg_start()
        for i in range(100, 164):
            await store.save("a", {"messages": msgs[: i + 1]})
        window.cg_stop()
    with sqlite3.connect(path) as conn:
        (out / f"save-{policy}.bytes").write_text(str(_stored(conn) - before))


async def cpu(out: Path, modes: list[str]) -> None:
    """CPU per cold load (``time.thread_time``, best of 7 rounds of ``N``), each mode in
    turn per round: the hardware's view (SHA instructions, SIMD) that callgrind lacks."""
    import time

    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    saver = lg_open(out / "lg.db", None)
    best = {m: float("inf") for m in modes}
    for _ in range(7):
        for mode in modes:
            if mode.startswith("lg"):
                cfg = lg_config(f"k{mode[2:]}")
                began = time.thread_time()
                for _ in range(N):
                    saver.get_tuple(cfg)
            else:
                agent = f"k{mode[2:]}"
                began = time.thread_time()
                for _ in range(N):
                    await store.load(agent)
            best[mode] = min(best[mode], (time.thread_time() - began) / N)
    await store.close()
    for mode in modes:
        print(f"{mode} {best[mode] * 1e6:.1f} us")


def _stored(conn: sqlite3.Connection) -> int:
    ev = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM sk_events").fetchone()
    sn = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM sk_snapshots").fetchone()
    return int(ev[0]) + int(sn[0])


def main() -> None:
    cmd, out = sys.argv[1], Path(sys.argv[2])
    if cmd == "build":
        asyncio.run(build(out, sys.argv[3]))
    elif cmd == "child":
        asyncio.run(measure(sys.argv[3], out))
    elif cmd == "cpu":
        asyncio.run(cpu(out, sys.argv[3:]))
    elif cmd == "child-save":
        asyncio.run(saves(out, sys.argv[3]))
    elif cmd == "run":
        total = run_window(__file__, ["child", str(out), sys.argv[3]], out, f"cg-{sys.argv[3]}")
        print(f"{sys.argv[3]} {total // N}")
    elif cmd == "save":
        out.mkdir(parents=True, exist_ok=True)
        policy = sys.argv[3]
        total = run_window(__file__, ["child-save", str(out), policy], out, f"cg-save-{policy}")
        stored = int((out / f"save-{policy}.bytes").read_text())
        print(f"save {policy} {total // 64} instructions, {stored // 64} bytes per save")


if __name__ == "__main__":
    main()
