"""Writers in several processes, a subscriber (and a projection runner) killed with
SIGKILL and restarted while they write: every event is seen exactly once, in order."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.feed import FeedCursor

from ..backends._services import fresh_url

CHILD = Path(__file__).with_name("_feed_child.py")
WRITERS, EVENTS = 3, 40
DEADLINE = 600.0  # seconds: a generous bound on a loaded machine, never a pause

pytestmark = pytest.mark.slow


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis", "redis-sharded"])
def feed_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The engines of the feed tests, and Redis in the sharded layout (4 feeds, one per
    shard, followed together: the resume point is a FeedCursor)."""
    engine = str(request.param)
    with fresh_url(engine.removesuffix("-sharded"), tmp_path) as url:
        yield url + "&shards=4" if engine.endswith("-sharded") else url


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, cwd=root, env=env
    )


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a condition, not waiting a duration


def _at_least(count: Callable[[], int], n: int) -> Callable[[], bool]:
    return lambda: count() >= n


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


async def _every_event(url: str) -> list[tuple[str, int]]:
    async with StateStore(url) as store:
        out = []
        async for info in store.iter_agents():
            out += [(info.agent_id, seq) for seq in range(1, info.head_seq + 1)]
        return sorted(out)


def test_a_killed_subscriber_resumes_without_gap_or_duplicate(
    feed_url: str, tmp_path: Path
) -> None:
    if feed_url.startswith("memory"):
        pytest.skip("a memory store is not shared between processes")
    out = tmp_path / "seen.txt"
    writers = [_spawn("write", feed_url, f"w{k}", str(EVENTS)) for k in range(WRITERS)]
    follower = _spawn("follow", feed_url, str(out))
    try:
        for kill_at in (10, 35, 70):  # kills while the writers write
            _wait(_at_least(lambda: _lines(out), kill_at), f"{kill_at} events seen")
            follower.send_signal(signal.SIGKILL)
            follower.wait()
            follower = _spawn("follow", feed_url, str(out))
        for w in writers:
            assert w.wait(timeout=DEADLINE) == 0
        total = WRITERS * EVENTS
        _wait(lambda: _lines(out) >= total, "every event seen")
    finally:
        follower.kill()
        follower.wait()
        for w in writers:
            w.kill()
            w.wait()
    rows = [line.split() for line in out.read_text().splitlines()]
    cursors = [FeedCursor.parse(r[0]).positions for r in rows]
    for before, after in itertools.pairwise(cursors):
        # each event moves one shard's position forward and no other back
        assert all(b <= a for b, a in zip(before, after, strict=True)), "out of order"
        assert sum(after) > sum(before), "seen twice"
    seen = sorted((r[1], int(r[2])) for r in rows)
    assert seen == asyncio.run(_every_event(feed_url))  # each exactly once, none missing
    for k in range(WRITERS):  # per agent, in seq order
        for a in range(3):
            agent = f"w{k}/agent-{a}"
            assert [int(r[2]) for r in rows if r[1] == agent] == list(
                range(1, len([r for r in rows if r[1] == agent]) + 1)
            )


def test_a_killed_projection_runner_applies_each_event_once(feed_url: str, tmp_path: Path) -> None:
    if feed_url.startswith("memory"):
        pytest.skip("a memory store is not shared between processes")
    read_model = tmp_path / "rm.db"
    writers = [_spawn("write", feed_url, f"w{k}", str(EVENTS)) for k in range(WRITERS)]

    def applied() -> int:
        if not read_model.exists():
            return 0
        try:
            with sqlite3.connect(read_model, timeout=30) as db:
                row = db.execute("SELECT sum(events) FROM agent_activity").fetchone()
        except sqlite3.OperationalError:
            return 0  # its tables are not there yet
        return int(row[0] or 0)

    runner = _spawn("project", feed_url, str(read_model))
    try:
        for kill_at in (5, 30, 60):
            _wait(_at_least(applied, kill_at), f"{kill_at} events applied")
            runner.send_signal(signal.SIGKILL)
            runner.wait()
            runner = _spawn("project", feed_url, str(read_model))
        for w in writers:
            assert w.wait(timeout=DEADLINE) == 0
        _wait(lambda: applied() >= WRITERS * EVENTS, "every event applied")
    finally:
        runner.kill()
        runner.wait()
        for w in writers:
            w.kill()
            w.wait()
    with sqlite3.connect(read_model) as db:
        counts = dict(db.execute("SELECT agent_id, events FROM agent_activity").fetchall())
        transitions = db.execute("SELECT count(*) FROM transitions").fetchone()[0]
    # each event exactly once: per agent, the count is its head
    assert counts == {
        f"w{k}/agent-{a}": EVENTS // 3 + (1 if a < EVENTS % 3 else 0)
        for k in range(WRITERS)
        for a in range(3)
    }
    assert transitions == 0  # plain saves set no state
