"""Is a group commit bound by the event loop or by its commit chain? (issue 11, 16 agents)

The SQLite commit queue keeps one batch in flight: the loop writes batch B and hands
its COMMIT to the commit thread the moment batch A lands, then runs the saves A's
landing woke. So each cycle is a chain — the loop's flush (BEGIN and B's statements,
the hand-off), the commit thread's COMMIT (the fsync), the landing back on the loop —
and the loop's work on A's saves overlaps the COMMIT. Whichever is longer sets the
rate. This script times each commit of N agents saving concurrently
(``durability="group"``) and prints, per commit (medians):

* ``flush``: the loop in ``_flush`` (``write``: BEGIN + the statements; ``hand``: the
  wait until the commit thread runs);
* ``commit``: the commit thread's COMMIT, wall and its thread CPU;
* ``late``: from the COMMIT's end to the loop's ``_landed``: the thread waiting for the
  GIL and the loop to notice. Large (about the loop's work on the other group's saves)
  means **loop-bound**: the fsync ended while the loop was still busy, and less loop
  CPU per save would raise the rate. Small means **chain-bound**: the loop was idle,
  waiting for the fsync, and only a shorter chain (or more rows per fsync) helps;
* ``cycle``: from one landing to the next (batches committed on the loop — "group3:
  a batch committed on the loop" —: from one flush to the next, and ``on the loop``
  splits their statements from their BEGIN/COMMIT and fsync).

``--rows`` replays the committer alone: N tasks hand pre-made rows to
``GroupCommitter.join_next`` (no store, no encoding), so the engine's own CPU per save
on the loop thread (``time.thread_time``) and in the process can be read apart from the
store's::

    .venv/bin/python benchmarks/bench_group_chain.py --agents 16
    .venv/bin/python benchmarks/bench_group_chain.py --agents 16 --rows
    PYTHONPATH=<main>/src .venv/bin/python benchmarks/bench_group_chain.py --agents 16

``--decoupled-fsync`` is an experiment, not the engine's design: the store's file at
``synchronous=NORMAL`` (in WAL mode a commit writes its frames without an fsync), the
``-wal`` file ``fdatasync``'d on a thread of its own, and each batch's saves settled
after the first fsync that *started* after its COMMIT returned (a lone commit syncs
inline): the queue's next batch is written while the previous one's fsync runs. It
prints the fsyncs the batches took (``batch fsyncs``) beside the commits.

Wall figures depend on the machine's load (printed beside them).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload
from statekeeper import StateStore
from statekeeper.backends.sqlite import backend as sqlite
from statekeeper.backends.sqlite import commits
from statekeeper.store.durability import GroupCommitter

#: (name, start, end, thread CPU) of each timed call, in order
EVENTS: list[tuple[str, float, float, float]] = []


def _timed(name: str) -> None:
    original = getattr(sqlite.SQLiteBackend, name)

    def timed(self: Any, *args: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return original(self, *args)
        finally:
            EVENTS.append((name, start, time.perf_counter(), time.thread_time() - cpu))

    setattr(sqlite.SQLiteBackend, name, timed)


for _name in (
    "_flush",
    "_write_batch",
    "_hand_commit",
    "_commit_written",
    "_landed",
    "_inline",
    "_append_all",
):
    _timed(_name)


def _median(values: list[float]) -> str:
    return f"{1e6 * statistics.median(values):7.0f}" if values else "      -"


def report(saves: int, wall: float, cpu: float, loop_cpu: float, commits: int) -> None:
    print(
        f"{saves} saves: {saves / wall:,.0f} saves/s (load average {os.getloadavg()[0]:.1f}),"
        f" CPU {1e6 * cpu / saves:.1f} us/save (loop thread {1e6 * loop_cpu / saves:.1f}),"
        f" {saves / max(commits, 1):.1f} saves/commit"
    )
    by = {name: [e for e in EVENTS if e[0] == name] for name, *_ in EVENTS}
    ends = [e[2] for e in by.get("_commit_written", [])]
    landed = [e[1] for e in by.get("_landed", [])]
    late = []
    for end in ends:  # the first landing after each COMMIT's end
        after = [t for t in landed if t >= end]
        if after:
            late.append(min(after) - end)
    # a cycle: landing to landing (handed-off batches), else flush to flush (batches
    # committed on the loop, "group3: a batch committed on the loop": no landing)
    flushes = [e[1] for e in by.get("_flush", [])]
    handed = len(landed) * 2 > len(flushes)  # most batches landed from a thread
    cycles = [b - a for a, b in itertools.pairwise(landed if handed else flushes)]
    print("per commit, medians in us:")
    print(f"  flush {_median([e[2] - e[1] for e in by.get('_flush', [])])}", end="")
    print(f"   (write {_median([e[2] - e[1] for e in by.get('_write_batch', [])])}", end="")
    print(f", hand {_median([e[2] - e[1] for e in by.get('_hand_commit', [])])})")
    commit = by.get("_commit_written", [])
    print(
        f"  commit {_median([e[2] - e[1] for e in commit])} wall,"
        f" {_median([e[3] for e in commit])} thread CPU"
    )
    print(f"  late  {_median(late)}   cycle {_median(cycles)}")
    inline = by.get("_inline", [])
    if inline:  # committed on the loop: its statements, then BEGIN/COMMIT and the fsync
        rows = by.get("_append_all", [])
        sql = [sum(r[2] - r[1] for r in rows if r[1] >= e[1] and r[2] <= e[2]) for e in inline]
        rest = [e[2] - e[1] - q for e, q in zip(inline, sql, strict=True)]
        print(
            f"  on the loop {len(inline)} commits: statements {_median(sql)},"
            f" BEGIN + COMMIT (fsync) {_median(rest)}"
        )
    if SYNCS:
        print(f"  batch fsyncs {len(SYNCS)} for {sum(SYNCS)} commits")


def decoupled_fsync() -> None:
    """The ``--decoupled-fsync`` experiment (see the module's docs)."""
    lone, inline = sqlite.SQLiteBackend._commit_lone, sqlite.SQLiteBackend._inline
    fds: dict[int, int] = {}
    pending: list[tuple[Any, Any, Any, int]] = []
    cond = threading.Condition()

    def wal(backend: Any) -> int:
        if id(backend) not in fds:
            fds[id(backend)] = os.open(backend.path + "-wal", os.O_RDONLY)
        return fds[id(backend)]

    def commit_lone(self: Any, *args: Any) -> Any:
        result = lone(self, *args)
        if result is not lone._BUSY:
            os.fdatasync(wal(self))
        return result

    def commit_inline(self: Any, requests: Any) -> Any:
        results = inline(self, requests)
        if results is not None:
            os.fdatasync(wal(self))
        return results

    def syncer(loop: asyncio.AbstractEventLoop) -> None:
        while True:
            with cond:
                while not pending:
                    cond.wait()
                taken = pending[:]
                del pending[:]
            os.fdatasync(wal(taken[0][0]))
            SYNCS.append(len(taken))
            loop.call_soon_threadsafe(settle, taken)

    def settle(taken: list[tuple[Any, Any, Any, int]]) -> None:
        for backend, queue, outcome, appends in taken:
            commits._settle(queue, outcome)
            backend._committed(appends)

    def landed(self: Any, loop: Any, queue: Any, appends: int, f: Any) -> None:
        self._in_flight.discard(loop)
        outcome = commits._outcome(f)
        if isinstance(outcome, BaseException):
            commits._settle(queue, outcome)
        else:
            if not SYNCS and not any(t.name == "xp-fsync" for t in threading.enumerate()):
                threading.Thread(target=syncer, args=(loop,), name="xp-fsync", daemon=True).start()
            with cond:
                pending.append((self, queue, outcome, appends))
                cond.notify()
        self._next(loop)

    sqlite.SQLiteBackend._commit_lone = commit_lone  # type: ignore[method-assign,assignment]
    sqlite.SQLiteBackend._inline = commit_inline  # type: ignore[method-assign]
    sqlite.SQLiteBackend._landed = landed  # type: ignore[method-assign]


#: batches covered by each fsync of the ``--decoupled-fsync`` experiment
SYNCS: list[int] = []


async def store_run(agents: int, last: int, sync: str) -> None:
    wl = Workload(agents, 10, last, chars=300)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/group.db?synchronous={sync}"
        async with StateStore(url, durability="group") as store:

            async def one(agent: str) -> None:
                for doc in docs[agent]:
                    await store.save(agent, doc)

            EVENTS.clear()
            c0, t0, l0 = time.process_time(), time.perf_counter(), time.thread_time()
            await asyncio.gather(*(one(a) for a in wl.agent_ids))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            loop_cpu = time.thread_time() - l0
            commits = store.stats().commits
    report(agents * len(wl.sizes), wall, cpu, loop_cpu, commits)


async def rows_run(agents: int, saves: int, sync: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = sqlite.SQLiteBackend(f"{tmp}/rows.db", synchronous=sync)  # type: ignore[arg-type]
        group = GroupCommitter(backend)
        payload = os.urandom(600)
        tags = [hashlib.sha256(b"%d" % seq).digest() for seq in range(saves + 1)]

        async def one(index: int) -> None:
            agent_id = f"agent-{index}"
            for seq in range(1, saves + 1):
                tag = tags[seq]
                expected = tags[seq - 1] if seq > 1 else None
                row = (agent_id, seq, time.time(), payload, tag, tag, expected, None)
                refused = await group.join_next(row)
                if refused is not None:
                    raise refused

        try:
            EVENTS.clear()
            commits = backend.append_commits
            c0, t0, l0 = time.process_time(), time.perf_counter(), time.thread_time()
            await asyncio.gather(*(one(i) for i in range(agents)))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            loop_cpu = time.thread_time() - l0
            commits = backend.append_commits - commits
        finally:
            await backend.close()
    report(agents * saves, wall, cpu, loop_cpu, commits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--last", type=int, default=160, help="messages in the last state")
    parser.add_argument("--sync", default="FULL", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--rows", action="store_true", help="the committer alone")
    parser.add_argument("--saves", type=int, default=300, help="saves per agent (--rows)")
    parser.add_argument("--decoupled-fsync", action="store_true", help="the fsync experiment")
    args = parser.parse_args()
    if args.decoupled_fsync:
        decoupled_fsync()
        args.sync = "NORMAL"
    print(f"loop thread {threading.get_native_id()}; {args.agents} agents, {args.sync}")
    if args.rows:
        asyncio.run(rows_run(args.agents, args.saves, args.sync))
    else:
        asyncio.run(store_run(args.agents, args.last, args.sync))


if __name__ == "__main__":
    main()
