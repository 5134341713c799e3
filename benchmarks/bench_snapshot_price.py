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

Modes ``tail`` / ``tail0`` price a *folded tail* (one row per agent, replaced each save,
holding every message since the last snapshot: :func:`folded_tail`).

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
    if mode.startswith("tail"):
        await folded_tail(window, path, docs, msgs, mode == "tail0")
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


#: the folded tail's body: every message appended since the last snapshot, one list
TAIL_HEAD, TAIL_END = b'{"ops":[{"op":"add","path":"/messages/-","values":[', b"]}]}"


async def folded_tail(
    window: Any, path: Path, docs: list[Any], msgs: list[Any], empty: bool
) -> None:
    """Mode ``tail``: the default store's saves, each followed by the work a folded tail
    would add (docs/benchmarks.md, "coldk"): the tail's body rebuilt with the new
    message's bytes (its JSON, which the save made already: made here before the
    window), its BLAKE3 link input hashed, and its row replaced, on a second connection
    to the same file (its own commit); emptied when the store writes a snapshot. Mode
    ``tail0`` does the same with a 32-byte row: ``tail`` − ``tail0`` is the price of the
    tail's bytes, ``tail0`` − ``bounded`` the price of a separate statement and commit
    (which a tail written in the save's own transaction would mostly not pay)."""
    import blake3
    import orjson

    values = [orjson.dumps(m) for m in msgs]
    url = f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, witness=False) as store:
        await store.save("a", docs[0])  # (the file made by the store)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tail (agent_id TEXT PRIMARY KEY, seq INTEGER,"
            " payload BLOB, checksum BLOB)"
        )
        for doc in docs[1:BASE]:
            await store.save("a", doc)
        record = store._reads.cache.peek("a")
        assert record is not None
        folded = values[record.snapshot_seq : BASE]
        prefix = b"sk-link/1\x00\x00\x00\x01a\x00\x00\x00\x04tail"
        sql = "INSERT OR REPLACE INTO tail VALUES ('a', ?, ?, ?)"
        window.cg_start()
        for i in range(BASE, len(docs)):
            await store.save("a", docs[i])
            record = store._reads.cache.peek("a")
            assert record is not None
            if record.snapshot_seq == i + 1:
                folded = []
            else:
                folded.append(values[i])
            body = b"".join((TAIL_HEAD, b",".join(folded), TAIL_END)) if not empty else b"x" * 32
            digest = blake3.blake3(prefix + body).digest()
            conn.execute(sql, (i + 1, body, digest))
        window.cg_stop()
    conn.close()


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
    for mode in (*map(str, EVERY), "tail", "tail0", "lg"):
        total = run_window(__file__, ["child", str(out), mode], out, f"cg-{mode}")
        bytes_file = out / f"{mode}.bytes"
        per = f"{int(bytes_file.read_text()) // COUNTED:,}" if bytes_file.exists() else "(peer)"
        print(f"| {mode} | {total // COUNTED:,} | {per} |")


if __name__ == "__main__":
    main()
