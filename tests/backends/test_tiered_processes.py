"""Monotonic reads across processes with a shared Redis hot tier (issue 9, item 1).

Several processes share a SQLite durable tier and a *private* ``redis-server`` as the
hot tier. Writers acknowledge saves, readers load, and the test freezes (SIGSTOP),
kills (SIGKILL), restarts empty, and restarts with old data (an RDB dump taken
earlier) that Redis server. Every load of every process must be at or above the
highest seq acknowledged before it started, and no process may see an agent go
backwards. Process-local memory cannot be relied on: the writer that saw the hot tier
fail is SIGKILLed before anyone reads again.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import tiered_url

from ._services import private_redis

pytestmark = pytest.mark.slow  # several processes on one tiered store

CHILD = Path(__file__).with_name("_tiered_child.py")
AGENT = "agent-1"
DEADLINE = 60.0  # a bound for a child's answer (a hang fails the test), never a wait


class Child:
    """One process with its own StateStore on the tiered URL."""

    def __init__(self, url: str, name: str) -> None:
        self.name = name
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(root / "src") + os.pathsep + str(root)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), url, AGENT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.seen = 0  # the highest seq this process has loaded
        assert self._answer() == {"ready": True}

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(DEADLINE):
                raise AssertionError(f"{self.name} did not answer within {DEADLINE}s")
        line = self.proc.stdout.readline()
        assert line, f"{self.name} exited (code {self.proc.poll()})"
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, f"{self.name}: {reply['error']}"
        return reply

    def call(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call(op="exit")
                self.proc.wait(timeout=DEADLINE)
            except Exception:
                self.kill()


class Run:
    """The acknowledged high-water mark and the checks every load must pass."""

    def __init__(self) -> None:
        self.acked = 0

    def save(self, child: Child, n: int) -> None:
        reply = child.call(op="save", n=n)
        assert reply["seq"] == n
        self.acked = max(self.acked, n)

    def load(self, child: Child) -> dict[str, Any]:
        floor = self.acked
        reply = child.call(op="load")
        seq = reply["seq"]
        assert seq >= floor, f"{child.name} loaded seq {seq}; seq {floor} was acknowledged"
        assert seq >= child.seen, f"{child.name} went back from seq {child.seen} to {seq}"
        assert reply["n"] == seq
        child.seen = seq
        return reply


def _hot_head(url: str) -> int:
    """The head of the agent's copy in the (thawed or restarted) Redis server."""
    from statekeeper.backends.redis import RedisBackend

    async def head() -> int:
        backend = RedisBackend(url, retry_timeout=5, evictable=True)  # (copies: a look)
        try:
            return await backend.head(AGENT)
        finally:
            await backend.close()

    return asyncio.run(head())


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_no_process_reads_below_an_acknowledged_seq_whatever_redis_does(
    tmp_path: Path,
) -> None:
    pytest.importorskip("redis")
    children: list[Child] = []

    def child(name: str) -> Child:
        started = Child(url, name)
        children.append(started)
        return started

    with private_redis() as server:
        url = tiered_url(
            hot=server.url,
            durable=f"sqlite:///{tmp_path}/durable.db",
            hot_timeout=0.3,
            hot_retry_after=0.1,
        )
        run = Run()
        try:
            writer, reader = child("writer"), child("long-running reader")
            for n in (1, 2, 3):
                run.save(writer, n)
            _until(
                lambda: run.load(reader)["seq"] == 3 and _hot_head(server.url) == 3,
                "the shared hot copy holds seq 3",
            )

            # 1. frozen: the writer acknowledges 4 and 5 from the durable tier alone,
            #    then dies; Redis thaws still holding seq 3
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                for n in (4, 5):
                    run.save(writer, n)
                assert run.load(reader)["seq"] == 5  # answered by the durable tier
                writer.kill()
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert 3 <= _hot_head(server.url) < 5  # the stale copy is back
            assert run.load(reader)["seq"] == 5
            fresh = child("new process")
            assert run.load(fresh)["seq"] == 5
            _until(
                lambda: run.load(fresh)["seq"] == 5 and _hot_head(server.url) == 5,
                "the hot copy is refilled",
            )
            _until(
                lambda: run.load(fresh)["stats"]["hot_hits"] > 0,
                "the refilled hot copy serves reads again",
            )

            # 2. killed: everything runs on the durable tier
            server.kill()
            writer = child("second writer")
            run.save(writer, 6)
            assert run.load(reader)["seq"] == 6
            assert run.load(fresh)["seq"] == 6

            # 3. restarted empty
            server.start()
            run.save(writer, 7)
            assert run.load(reader)["seq"] == 7
            assert run.load(child("third process"))["seq"] == 7
            _until(
                lambda: run.load(fresh)["seq"] == 7 and _hot_head(server.url) == 7,
                "the restarted hot tier is refilled",
            )

            # 4. restarted with old data: dump at seq 7, write on, crash, restart
            import redis

            client = redis.Redis.from_url(server.url)
            try:
                client.save()
            finally:
                client.close()
            for n in (8, 9):
                run.save(writer, n)
            _until(
                lambda: run.load(fresh)["seq"] == 9 and _hot_head(server.url) == 9,
                "the hot copy reaches seq 9",
            )
            server.kill()
            server.start()
            assert _hot_head(server.url) == 7  # Redis came back with the old dump
            assert run.load(child("fourth process"))["seq"] == 9
            assert run.load(reader)["seq"] == 9
            assert run.load(fresh)["seq"] == 9
            run.save(writer, 10)
            for reading in children:
                if reading.proc.poll() is None:
                    assert run.load(reading)["seq"] == 10
        finally:
            for started in children:
                started.close()
