"""What one snapshot costs the save that writes it, on the hardware (issue 11).

valgrind emulates SHA-256 without the CPU's SHA extensions, so callgrind overweights the
snapshot's checksum; this measures the parts in CPU time instead (``thread_time`` for
the Python parts, ``getrusage(RUSAGE_THREAD)`` user + system for SQLite's), for a chat
state of ``--messages`` messages of ~300 characters (``bench_coldload``'s):

* ``packed body``: :func:`statekeeper.store.body.packed_snapshot_body` (the state's
  packed bytes joined into the msgpack body);
* ``seal``: ``Codec.seal`` of that body (SHA-256 once: the link is the checksum of an
  uncompressed record without a key) and ``sha256`` alone;
* ``encode``: ``SnapshotPolicy.encode`` (both, and the record's marks);
* ``sqlite row``: a transaction of one 450-byte event row against the same plus the
  snapshot row (``INSERT OR REPLACE``), the store's page size, WAL, a passive checkpoint
  every 200 transactions (the WAL pages written are copied to the file once: counted);
* ``save``: ``StateStore.save`` CPU of the saves that wrote a snapshot against those that
  did not, with ``snapshot_every="cost"``, 40 agents from 10 to 30 messages
  (``bench_hotpath --quick``'s states);
* ``interleaved A/B``: the mean CPU per save of ``snapshot_every=100``, ``"cost"`` and
  ``"cost"`` with ``EVENT_COST`` 8192 (what kept the worst head position under 2x
  ``get_tuple`` in ``bench_coldload --quick``), three stores in one process, their
  saves interleaved one by one in a rotating order: the same minute and the same load
  for each (the wall-clock A/Bs of ``bench_hotpath`` do not separate a few µs per save
  on a loaded machine).

Run::

    .venv/bin/python benchmarks/bench_snapshot_parts.py --sync NORMAL FULL
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from statekeeper import StateStore
from statekeeper.backends.sqlite import PAGE_SIZE
from statekeeper.codec.formats import MSGPACK
from statekeeper.store import snapshots
from statekeeper.store.body import SNAPSHOT_TYPE, packed_snapshot_body


def best_us(fn: Callable[[], object], n: int = 2000) -> float:
    """Least CPU per call over 5 runs of ``n`` calls, in µs."""
    out = []
    for _ in range(5):
        began = time.thread_time()
        for _ in range(n):
            fn()
        out.append((time.thread_time() - began) / n)
    return 1e6 * min(out)


async def encode_parts(tmp: str, messages: int) -> dict[str, float]:
    store = StateStore(f"sqlite:///{tmp}/enc.db?synchronous=OFF", snapshot_every=10**6)
    msgs = make_messages(messages, seed=1, chars=300)
    for i in range(1, messages + 1):
        await store.save("a", {"messages": msgs[:i]})
    record = store._reads.cache._data["a"]
    policy, codec = store._snapshots, store._writes.codec
    body = packed_snapshot_body(record, None)
    assert body is not None and record.link is not None
    raw, _ = policy.encode(record)
    link = record.link
    out = {
        "bytes": float(len(raw.payload)),
        "packed body": best_us(lambda: packed_snapshot_body(record, None)),
        "seal": best_us(lambda: codec.seal("a", 1, SNAPSHOT_TYPE, 0.0, body, link, fmt=MSGPACK)),
        "sha256 alone": best_us(lambda: hashlib.sha256(raw.payload).digest()),
        "encode": best_us(lambda: policy.encode(record)),
    }
    await store.close()
    return out


def sqlite_row(tmp: str, sync: str, size: int) -> dict[str, float]:
    """CPU (user + system) of a transaction with and without a ``size``-byte snapshot row."""
    conn = sqlite3.connect(f"{tmp}/row-{sync}-{size}.db", isolation_level=None)
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute(
        "CREATE TABLE ev(agent_id TEXT, seq INT, payload BLOB, PRIMARY KEY(agent_id, seq))"
        " WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TABLE sn(agent_id TEXT, seq INT, payload BLOB, PRIMARY KEY(agent_id, seq))"
    )
    event, snap = os.urandom(450), os.urandom(size)
    seq = 0

    def run(n: int, with_snapshot: bool) -> float:
        nonlocal seq
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(n):
            seq += 1
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO ev VALUES (?, ?, ?)", ("a", seq, event))
            if with_snapshot:
                conn.execute("INSERT OR REPLACE INTO sn VALUES (?, ?, ?)", ("a", seq, snap))
            conn.execute("COMMIT")
            if seq % 200 == 0:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        return 1e6 * (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n

    n = 300 if sync == "FULL" else 2000
    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3):
        for with_snapshot in (False, True):
            runs[with_snapshot].append(run(n, with_snapshot))
    conn.close()
    without, with_ = statistics.median(runs[False]), statistics.median(runs[True])
    return {"event tx": without, "event + snapshot tx": with_, "snapshot row": with_ - without}


async def saves(tmp: str, sync: str, agents: int = 40) -> dict[str, float]:
    store = StateStore(
        f"sqlite:///{tmp}/saves-{sync}.db?synchronous={sync}",
        durability="sync",
        snapshot_every="cost",
    )
    msgs = {a: make_messages(30, seed=a, chars=300) for a in range(agents)}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    writes = store._writes
    for n in range(10, 31):
        for a in range(agents):
            before = writes.snapshots_written
            began = time.thread_time()
            await store.save(f"a{a}", {"messages": msgs[a][:n]})
            cpu[writes.snapshots_written > before].append(time.thread_time() - began)
    await store.close()
    total = len(cpu[False]) + len(cpu[True])
    with_, without = statistics.median(cpu[True]), statistics.median(cpu[False])
    return {
        "saves per snapshot": total / len(cpu[True]),
        "save without": 1e6 * without,
        "save with": 1e6 * with_,
        "per snapshot": 1e6 * (with_ - without),
        "amortised per save": 1e6 * (with_ - without) * len(cpu[True]) / total,
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


#: the policies the interleaved A/B compares: (name, snapshot_every, EVENT_COST)
POLICIES = (
    ("every 100", 100, None),
    ("cost", "cost", None),
    ("cost, EVENT_COST 8192", "cost", 8192),
)


async def interleaved(tmp: str, sync: str, rounds: int, agents: int = 20) -> str:
    """Mean CPU per save of each policy, the stores' saves interleaved one by one in one
    process (same minute, same load): ``bench_hotpath --quick``'s states, 10 -> 30
    messages per agent, a new set of agents each round."""
    stores = [
        StateStore(
            f"sqlite:///{tmp}/ab-{sync}-{i}.db?synchronous={sync}",
            durability="sync",
            snapshot_every=every,
        )
        for i, (_, every, _) in enumerate(POLICIES)
    ]
    default_cost = snapshots.EVENT_COST
    means: list[list[float]] = [[] for _ in POLICIES]
    written = [0] * len(POLICIES)
    for r in range(rounds):
        msgs = {a: make_messages(30, seed=a, chars=300) for a in range(agents)}
        cpu = [0.0] * len(POLICIES)
        count = 0
        for n in range(10, 31):
            for a in range(agents):
                count += 1
                order = list(range(len(POLICIES)))
                order = order[count % len(order) :] + order[: count % len(order)]
                for i in order:
                    event_cost = POLICIES[i][2]
                    snapshots.EVENT_COST = default_cost if event_cost is None else event_cost
                    began = time.thread_time()
                    await stores[i].save(f"r{r}-a{a}", {"messages": msgs[a][:n]})
                    cpu[i] += time.thread_time() - began
        snapshots.EVENT_COST = default_cost
        for i in range(len(POLICIES)):
            means[i].append(1e6 * cpu[i] / count)
    for i, store in enumerate(stores):
        written[i] = store._writes.snapshots_written
        await store.close()
    saves = rounds * agents * 21
    base = statistics.median(means[0])
    lines = []
    for i, (name, _, _) in enumerate(POLICIES):
        m = statistics.median(means[i])
        lines.append(
            f"  {name}: {m:.1f} µs CPU per save [{min(means[i]):.1f}..{max(means[i]):.1f}],"
            f" {m - base:+.1f} ({100 * (m / base - 1):+.1f} %), "
            + (f"{saves / written[i]:.1f} saves per snapshot" if written[i] else "no snapshot")
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    print(f"load average {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="sk-snapparts-") as tmp:
        for messages in args.messages:
            parts = await encode_parts(tmp, messages)
            size = int(parts.pop("bytes"))
            cells = ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
            print(f"{messages} messages, snapshot {size:,} B: {cells} µs CPU")
            for sync in args.sync:
                row = sqlite_row(tmp, sync, size)
                cells = ", ".join(f"{k} {v:.1f}" for k, v in row.items())
                print(f"  sqlite {sync}: {cells} µs CPU (user + system)")
        for sync in args.sync:
            got = await saves(tmp, sync)
            cells = ", ".join(f"{k} {v:.1f}" for k, v in got.items())
            print(f"saves, snapshot_every='cost', {sync}: {cells} (µs CPU)")
        for sync in args.sync:
            print(f"interleaved A/B, {sync}, {args.rounds} rounds (median of the round means):")
            print(await interleaved(tmp, sync, args.rounds))
    print(f"load average {loadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--sync", nargs="+", default=["NORMAL", "FULL"])
    parser.add_argument("--rounds", type=int, default=5, help="of the interleaved A/B")
    asyncio.run(main(parser.parse_args()))
