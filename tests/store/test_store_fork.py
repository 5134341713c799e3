"""An async ``StateStore`` used in a process forked from the one that opened it
(multiprocessing's fork start method, ``gunicorn --preload``, ``os.fork``).

The child inherits the parent's connections, thread pools and write-behind buffer. Before
this was handled, a SQLite commit in the child waited for ever for the parent's commit
thread (which does not exist in the child), PostgreSQL replies crossed between the two
processes (the parent's next write then failed: 'prepared statement "_pg3_0" already
exists'), a Redis call raised asyncio's untyped "attached to a different loop", and the
child's ``close()`` wrote the parent's buffered events a second time. Now every call in
the child raises ``StoreClosed`` naming the fork, ``close()`` there leaves the parent's
connections and buffer alone, and the parent carries on. A hang shows as a bounded wait
that fails; nothing here sleeps for a duration."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import StoreClosed

from ..backends._services import fresh_url

#: a bound only a hang reaches
HANG = 60.0

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as url:
        yield url


async def _burst(store: StateStore, tag: str, n: int = 20) -> None:
    """Concurrent saves: on SQLite the batches go through the commit thread."""

    async def one(i: int) -> None:
        agent = await store.agent(f"{tag}-{i}")
        agent.data["i"] = i
        await agent.save()

    await asyncio.gather(*(one(i) for i in range(n)))


def _fork(child: Callable[[], Coroutine[Any, Any, None]]) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork of a threaded process)
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            asyncio.run(child())
            code = 0
        finally:
            os._exit(code)
    return pid


def _wait(pid: int) -> int:
    deadline = time.monotonic() + HANG
    while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hangs")
        time.sleep(0.005)
    return os.waitstatus_to_exitcode(ended[1])


def test_a_store_in_a_forked_child_refuses_calls_and_the_parent_carries_on(
    url: str, tmp_path: Path
) -> None:
    loop = asyncio.new_event_loop()
    store = StateStore(url)
    report = tmp_path / "child.json"
    try:
        loop.run_until_complete(_burst(store, "parent"))

        async def child() -> None:
            seen: dict[str, str] = {}

            async def attempt(name: str, call: object) -> None:
                try:
                    await call  # type: ignore[misc]
                except StoreClosed as exc:
                    seen[name] = f"StoreClosed: {exc}"
                except BaseException as exc:
                    seen[name] = f"{type(exc).__name__}: {exc}"
                else:
                    seen[name] = "ran"

            await attempt("load", store.load("parent-1"))
            await attempt("save", store.save("child-1", {"from": "child"}))
            await attempt("burst", _burst(store, "child", 5))
            await attempt("flush", store.flush())
            await store.close()  # returns, and leaves the parent's connections alone
            report.write_text(json.dumps(seen))

        assert _wait(_fork(child)) == 0
        seen = json.loads(report.read_text())
        assert set(seen) == {"load", "save", "burst", "flush"}
        for name, outcome in seen.items():
            assert outcome.startswith("StoreClosed: ") and "fork" in outcome, (name, outcome)
            assert str(os.getpid()) in outcome, (name, outcome)  # names the parent

        async def parent_again() -> None:  # the parent's connections still serve it
            await _burst(store, "parent")
            for i in range(20):
                assert (await store.load(f"parent-{i}")).data == {"i": i}
                assert await store.head(f"parent-{i}") == 2
            assert await store.get("child-1") is None
            assert await store.get("child-0") is None

        loop.run_until_complete(parent_again())
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def test_a_forked_child_never_writes_the_parents_buffered_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    loop = asyncio.new_event_loop()
    store = StateStore(url, durability="async", flush_interval=3600, flush_size=1000)
    try:
        loop.run_until_complete(store.save("a-1", {"n": 1}))  # buffered, not yet written

        async def child() -> None:
            await store.close()  # would flush the parent's buffer: must not

        assert _wait(_fork(child)) == 0

        async def count() -> int:
            async with StateStore(url) as other:
                return await other.head("a-1")

        assert asyncio.run(count()) == 0  # the child wrote nothing
        loop.run_until_complete(store.flush())  # the parent's buffer, written once
        assert asyncio.run(count()) == 1
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def test_a_langgraph_saver_in_a_forked_child_refuses_calls(url: str, tmp_path: Path) -> None:
    """Sync calls (plain, and from a running event loop: handed to the saver's loop,
    whose thread exists only in the parent), async calls and ``close()`` in the child."""
    pytest.importorskip("langgraph")
    from statekeeper.integrations.langgraph import StatekeeperSaver

    saver = StatekeeperSaver.from_url(url)
    report = tmp_path / "child.json"
    config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    try:
        checkpoint: Any = {"v": 1, "id": "1", "ts": "", "channel_values": {"n": 1}}
        checkpoint |= {"channel_versions": {"n": 1}, "versions_seen": {}}
        saver.put(config, checkpoint, {}, {"n": 1})
        assert asyncio.run(saver.aget_tuple(config)) is not None  # (its thread started)

        async def child() -> None:
            seen: dict[str, str] = {}

            def attempt(name: str, call: Callable[[], object]) -> None:
                try:
                    call()
                except StoreClosed as exc:
                    seen[name] = f"StoreClosed: {exc}"
                except BaseException as exc:
                    seen[name] = f"{type(exc).__name__}: {exc}"
                else:
                    seen[name] = "ran"

            listed = ("plain", lambda: list(saver.list(config)))
            plain = threading.Thread(target=attempt, args=listed)
            plain.start()  # (a thread with no event loop: the call runs the saver's loop)
            plain.join()
            attempt("in a loop", lambda: saver.get_tuple(config))  # (handed over)
            try:
                await saver.aget_tuple(config)
            except StoreClosed as exc:
                seen["async"] = f"StoreClosed: {exc}"
            saver.close()  # returns, and leaves the parent's store alone
            report.write_text(json.dumps(seen))

        assert _wait(_fork(child)) == 0
        seen = json.loads(report.read_text())
        assert set(seen) == {"plain", "in a loop", "async"}
        for name, outcome in seen.items():
            assert outcome.startswith("StoreClosed: ") and "fork" in outcome, (name, outcome)
        tup = saver.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"] == {"n": 1}
    finally:
        saver.close()


_CHILD_EXITS = """
import asyncio, os, sys
from statekeeper import StateStore
loop = asyncio.new_event_loop()
store = StateStore(sys.argv[1], durability="async", flush_interval=3600, flush_size=1000)
loop.run_until_complete(store.save("a-1", {"n": 1}))
pid = os.fork()
if pid == 0:  # a worker that ends normally: its interpreter collects its copies
    err = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    sys.exit(0)
os.waitpid(pid, 0)
loop.close()  # (the child's collection of this loop unregistered its self-pipe)
os._exit(0)
"""


def test_a_forked_child_that_exits_reports_no_loss_of_the_parents_buffer(tmp_path: Path) -> None:
    """The child's copy of the write-behind buffer is collected at its exit: it warned
    "UnflushedWritesWarning: ... 1 buffered event(s) of 1 agent(s) never written: they
    are lost" and logged an error, about writes the parent still holds and writes."""
    child_err = tmp_path / "child.err"
    subprocess.run(
        [sys.executable, "-c", _CHILD_EXITS, f"sqlite:///{tmp_path / 'a.db'}", str(child_err)],
        check=True,
        timeout=HANG,
    )
    assert "lost" not in child_err.read_text()
