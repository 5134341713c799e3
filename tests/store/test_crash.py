"""Crash tests with real processes: a child writes and acknowledges every write to us;
we SIGKILL it at a random moment, reopen the file, and check the promise of its
durability mode.

* ``sync`` and ``group``: every acknowledged write is stored, with its content, at the
  seq it was acknowledged with (RPO = 0).
* ``async``: at most ``flush_size`` acknowledged writes are lost (the documented bound),
  and those are the newest ones.
* always: the file reopens, every agent loads, and ``verify()`` finds nothing wrong.

Several rounds run on the same file, so later rounds also recover from earlier crashes.
Set ``STATEKEEPER_CRASH_SEED`` to replay a run; the seed is in every failure message.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from statekeeper import StateStore, patch

CHILD = Path(__file__).with_name("_crash_child.py")
SEED = int(os.environ.get("STATEKEEPER_CRASH_SEED", random.randrange(2**32)))

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL"),
    pytest.mark.slow,  # SIGKILL at random, every acknowledged save present
]


@dataclass(frozen=True)
class Ack:
    agent: str
    seq: int
    writer: int
    n: int


def run_and_kill(
    db: Path,
    mode: str,
    *,
    writers: int,
    agents: int,
    delay: float,
    seed: int,
    flush_size: int,
    after: int = 1,
) -> list[Ack]:
    """Start a writer process, let it write for ``delay`` seconds after its ``after``-th
    acknowledged write, SIGKILL it, and return every acknowledgement it completed."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            str(db),
            mode,
            str(writers),
            str(agents),
            str(seed),
            str(flush_size),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[bytes] = []
    first_ack = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        acks = 0
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(b"ACK "):
                acks += 1
                if acks >= after:
                    first_ack.set()
        first_ack.set()  # EOF: the child is gone either way

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert first_ack.wait(timeout=90), f"the child never acknowledged {after} writes"
        threading.Event().wait(delay)  # the random kill point
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=30)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == -signal.SIGKILL, f"child failed before the kill:\n{stderr}"
    acks = []
    for line in lines:
        if line.startswith(b"ACK ") and line.endswith(b"\n"):  # a torn last line is no ack
            _, agent, seq, writer, n = line.split()
            acks.append(Ack(agent.decode(), int(seq), int(writer), int(n)))
    return acks


async def check(db: Path, acks: list[Ack], *, max_lost: int, context: str) -> list[Ack]:
    """Reopen ``db`` and check every acknowledged write; return the ones lost."""
    async with StateStore(f"sqlite:///{db}") as store:
        report = await store.verify()  # every checksum, seq and snapshot
        assert report.ok, f"{context}: {report.problems}"
        stored: dict[tuple[str, int], tuple[int, int]] = {}
        heads: dict[str, int] = {}
        async for info in store.iter_agents():
            agent = info.agent_id
            heads[agent] = (await store.load(agent)).seq  # the latest state always loads
            doc: dict[str, int] = {}
            async for event in store.history(agent):  # what each seq holds
                doc = patch.apply(doc, event.ops)
                stored[agent, event.seq] = (doc["w"], doc["n"])
        lost = [a for a in acks if a.seq > heads.get(a.agent, 0)]
        assert len(lost) <= max_lost, f"{context}: {len(lost)} acknowledged writes lost"
        for ack in acks:
            if ack not in lost:
                assert stored[ack.agent, ack.seq] == (ack.writer, ack.n), (
                    f"{context}: seq {ack.seq} of {ack.agent} holds {stored[ack.agent, ack.seq]}"
                    f", acknowledged as writer {ack.writer} n={ack.n}"
                )
        # spot-check the store's own time travel against the fold above
        for ack in [a for a in acks if a not in lost][-10:]:
            state = await store.load(ack.agent, at_seq=ack.seq)
            assert (state.data["w"], state.data["n"]) == (ack.writer, ack.n), context
        return lost


def crash_rounds(
    tmp_path: Path,
    mode: str,
    *,
    rounds: int,
    writers: int,
    agents: int,
    flush_size: int = 100,
    max_lost: int = 0,
    after: int = 1,
) -> tuple[int, int]:
    """Kill a writer ``rounds`` times on one file, each time at least ``after`` writes
    in; return (acknowledged, lost) writes."""
    rng = random.Random(f"{SEED}-{mode}")
    db = tmp_path / f"crash-{mode}.db"
    kept: list[Ack] = []
    lost_total = 0
    for round_no in range(rounds):
        delay = rng.uniform(0.0, 0.35)
        context = f"mode={mode} seed={SEED} round={round_no} delay={delay:.3f}"
        new = run_and_kill(
            db,
            mode,
            writers=writers,
            agents=agents,
            delay=delay,
            seed=rng.randrange(2**32),
            flush_size=flush_size,
            after=after,
        )
        assert new, f"{context}: no acknowledged writes"
        lost = asyncio.run(check(db, new, max_lost=max_lost, context=context))
        lost_total += len(lost)
        # what earlier rounds stored survives the later crashes too
        kept.extend(a for a in new if a not in lost)
        asyncio.run(check(db, kept, max_lost=0, context=f"{context} (all rounds)"))
    return len(kept) + lost_total, lost_total


@pytest.mark.timeout(120)
def test_sync_mode_loses_no_acknowledged_write(tmp_path: Path) -> None:
    acked, lost = crash_rounds(tmp_path, "sync", rounds=6, writers=1, agents=1)
    assert acked > 0 and lost == 0


@pytest.mark.timeout(240)
def test_sync_mode_loses_nothing_past_the_wal_estimate_check_and_first_checkpoints(
    tmp_path: Path,
) -> None:
    """Killed only after 600 acknowledged saves (~3,400 WAL frames: past the check of
    the WAL-page estimate against the WAL's size and the checkpoints and WAL restarts it
    brings forward), each round reopening the WAL the last one left behind."""
    acked, lost = crash_rounds(tmp_path, "sync", rounds=3, writers=1, agents=1, after=600)
    assert acked >= 3 * 600 and lost == 0


@pytest.mark.timeout(240)
def test_sync_mode_loses_nothing_from_a_wal_grown_ahead(tmp_path: Path) -> None:
    """Killed a few saves in, while the WAL file grown ahead after the first commits
    (``synchronous=FULL``, see ``backends/sqlite/wal.py``) is mostly zeros past its last
    frame: the WAL is grown (a step at least) when the process dies, and SQLite's
    recovery of it loses no acknowledged save; four rounds on one file, each process
    growing the WAL anew (the check's close removed the last one)."""
    from statekeeper.backends.sqlite import PAGE_SIZE
    from statekeeper.backends.sqlite.wal import GROW_STEP

    rng = random.Random(f"{SEED}-grown")
    db = tmp_path / "crash-grown.db"
    kept: list[Ack] = []
    for round_no in range(4):
        delay = rng.uniform(0.0, 0.05)
        context = f"grown WAL seed={SEED} round={round_no} delay={delay:.3f}"
        new = run_and_kill(
            db,
            "sync",
            writers=1,
            agents=1,
            delay=delay,
            seed=rng.randrange(2**32),
            flush_size=100,
            after=20,  # (grown after ~10 saves: the next ones queued behind it)
        )
        assert len(new) >= 20, context
        wal = Path(f"{db}-wal")
        assert wal.stat().st_size >= 32 + GROW_STEP * (PAGE_SIZE + 24), context
        assert asyncio.run(check(db, new, max_lost=0, context=context)) == []
        kept.extend(new)
        asyncio.run(check(db, kept, max_lost=0, context=f"{context} (all rounds)"))


@pytest.mark.timeout(120)
def test_group_mode_with_concurrent_writers_loses_nothing(tmp_path: Path) -> None:
    acked, lost = crash_rounds(tmp_path, "group", rounds=4, writers=8, agents=4)
    assert acked > 0 and lost == 0


@pytest.mark.timeout(120)
def test_async_mode_loses_at_most_flush_size(tmp_path: Path) -> None:
    flush_size = 20
    acked, _ = crash_rounds(
        tmp_path,
        "async",
        rounds=4,
        writers=4,
        agents=2,
        flush_size=flush_size,
        max_lost=flush_size,
    )
    assert acked > 0
