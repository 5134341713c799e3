"""A lone keyed append's instructions on SQLite (issue 12, "lgsmall"): what the
LangGraph saver's checkpoint commits cost in the store and the backend, without
LangGraph's threads or the saver's plan.

One store (the saver's codec: zstd with the dictionary from 64 bytes, snapshots off),
one agent; ``APPENDS`` appends of a small checkpoint-like op list, each with its own
idempotency key and ``expected_seq`` (as the saver appends), counted under callgrind
(every thread) after ``WARM`` uncounted ones. Prints instructions per append. Run it
with two trees' ``PYTHONPATH`` to compare them::

    PYTHONPATH=<tree>/src python benchmarks/bench_keyed_append_window.py 300 /tmp/x
    PYTHONPATH=<tree>/src python benchmarks/bench_keyed_append_window.py 300 /tmp/x --no-key
    PYTHONPATH=<tree>/src python benchmarks/bench_keyed_append_window.py 300 /tmp/x --path lean

``--statements five`` / ``--statements one`` count the statements alone (this tree's
SQL, on a store file, raw ``sqlite3``, the same 420-byte payload every append): the
five a keyed append ran before (``BEGIN IMMEDIATE``, the key's ``INSERT``, the head's
``UPDATE``, the event's ``INSERT``, ``COMMIT``) or the one it runs now
(``INSERT INTO sk_append_row``, the TEMP view's trigger making the same rows).
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window, slowed_clock

WARM = 50
KEYED = "--no-key" not in sys.argv
#: ``--path applied``: each append by ``WritePipeline.append_applied`` (the saver's path
#: before "lgsmall2", the document after the ops handed over); ``--path lean``: by the
#: store's lean keyed append (``store/lean.py``, the saver's path after it); default:
#: ``StateStore.append``
PATH = sys.argv[sys.argv.index("--path") + 1] if "--path" in sys.argv else "append"


def _ops(i: int) -> list[dict[str, object]]:
    cid = f"1f1f0b59-f244-6366-8{i:03d}-ab03e1261617"
    return [
        {"op": "replace", "path": "/cp", "value": {"h": [cid, "2026-12-05T14:00:00+00:00"]}},
        {"op": "replace", "path": "/n", "value": i},
    ]


def _after(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cp": ops[0]["value"], "n": ops[1]["value"]}


async def _write(appends: int, out: Path) -> None:
    from statekeeper import Codec, StateStore

    slowed_clock()
    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    codec = Codec(compression="zstd-dict", compress_min_bytes=64)
    url = f"sqlite:///{tmp / 'keyed.db'}?synchronous=NORMAL"
    async with StateStore(url, codec=codec, snapshot_every=1_000_000) as store:
        seq = (await store.create("lg/t#1", {"cp": None, "n": 0})).last_seq
        for i in range(WARM + appends):
            if i == WARM:
                window.cg_start()
            key = f"k{i:016d}" if KEYED else None
            ops = _ops(i)
            result: Any = None
            if PATH == "lean":
                lean = store._writes.lean
                assert lean is not None
                result = lean("lg/t#1", "lg.cp", ops, seq, key, _after(ops))
                if result is not None and not hasattr(result, "last_seq"):
                    result = await result
            elif PATH == "applied":
                result = await store._writes.append_applied(
                    "lg/t#1", "lg.cp", ops, seq, key, _after(ops), True
                )
            if result is None:
                result = await store.append(
                    "lg/t#1", "lg.cp", ops=ops, expected_seq=seq, idempotency_key=key
                )
            seq = result.last_seq
        window.cg_stop()


def _statements(kind: str, appends: int, out: Path) -> None:
    import hashlib
    import sqlite3

    from statekeeper import StateStore
    from statekeeper.backends.sqlite import statements as engine

    window = ctypes.CDLL(str(helper(out)))
    path = Path(tempfile.mkdtemp(dir=out)) / "statements.db"

    async def schema() -> None:
        async with StateStore(f"sqlite:///{path}") as store:
            await store.create("a", {})

    asyncio.run(schema())
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    for sql in engine._APPEND_NEXT_SCHEMA:  # type: ignore[attr-defined]
        conn.execute(sql)
    conn.execute("UPDATE sk_agents SET head_tag = ? WHERE agent_id = 'a'", (bytes(34),))
    cur = conn.cursor()
    payload = bytearray(420)
    checksum = bytearray(hashlib.sha256(payload).digest())
    tag = bytearray(34)
    seq = 1
    for i in range(WARM + appends):
        if i == WARM:
            window.cg_start()
        seq += 1
        key = f"k{i:016d}"
        if kind == "one":
            cur.execute(
                engine._APPEND_NEXT,  # type: ignore[attr-defined]
                ("a", seq, "lg.cp", 1.0, payload, checksum, tag, tag, key),
            )
        else:
            cur.execute("BEGIN IMMEDIATE")
            cur.execute(engine._CLAIM_KEY, ("a", key, seq, seq, 1.0))
            cur.execute(engine._CLAIM[True], (seq, 1.0, tag, "a", seq - 1, tag))
            cur.execute(engine._INSERT_EVENT, ("a", seq, "lg.cp", 1.0, payload, checksum))
            cur.execute("COMMIT")
    window.cg_stop()
    conn.close()


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "write":
        asyncio.run(_write(int(sys.argv[2]), Path(sys.argv[3])))
        return
    if sys.argv[1] == "statements":
        _statements(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    appends, out = int(sys.argv[1]), Path(sys.argv[2])
    if "--statements" in sys.argv:
        kind = sys.argv[sys.argv.index("--statements") + 1]
        total = run_window(__file__, ["statements", kind, str(appends), str(out)], out, "stmts")
        print(f"{total / appends:>12,.0f} instructions a keyed append's statements ({kind})")
        return
    rest = ([] if KEYED else ["--no-key"]) + (["--path", PATH] if PATH != "append" else [])
    total = run_window(__file__, ["write", str(appends), str(out), *rest], out, "keyed")
    what = ("keyed append" if KEYED else "append (no key)") + f" ({PATH})"
    print(f"{total / appends:>12,.0f} instructions a {what}", flush=True)


if __name__ == "__main__":
    main()
