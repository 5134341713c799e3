"""A store with ``durability="async"`` never closed keeps its buffered writes when
``asyncio.run`` ends, and one collected with writes still buffered says so.

Before, an application whose coroutine returned without ``await store.close()`` (or
``flush()``) lost every write still in the write-behind buffer, without a word: the
buffer's flush was a timer on a loop ``asyncio.run`` then closed. Now the buffer has a
task on its loop that ``asyncio.run`` cancels at its end, and that cancellation writes
the buffer out. A store whose loop was closed some other way (no cancellation) and
that is then collected warns :class:`~statekeeper.errors.UnflushedWritesWarning`. A
``SyncStateStore`` left open has its store flushed at interpreter exit.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)

SRC = Path(__file__).resolve().parents[2] / "src"

_WRITE = """
import asyncio, sys
sys.path.insert(0, {src!r})
from statekeeper import StateStore
async def main():
    store = StateStore({url!r}, durability="async", flush_interval=3600.0)  # never closed
    for i in range(10):
        await store.create(f"a{{i}}", data={{"n": i}})
    print(store.stats().buffered)
asyncio.run(main())
"""

_SYNC_WRITE = """
import sys
sys.path.insert(0, {src!r})
from statekeeper import SyncStateStore
store = SyncStateStore({url!r}, durability="async", flush_interval=3600.0)  # never closed
for i in range(10):
    store.create(f"a{{i}}", data={{"n": i}})
print(store.stats().buffered)
"""

# the interpreter's teardown collects what the store left on its loop only sometimes:
# this exit hook (registered first, so run last) collects it every time
_SYNC_COLLECTED = """
import atexit, gc, sys
sys.path.insert(0, {src!r})
def collect():
    globals().pop("store", None)
    gc.collect()
atexit.register(collect)
from statekeeper import SyncStateStore
store = SyncStateStore({url!r}, durability="async", flush_interval=3600.0)  # never closed
for i in range(10):
    store.create(f"a{{i}}", data={{"n": i}})
print(store.stats().buffered)
"""

_COUNT = """
import asyncio, sys
sys.path.insert(0, {src!r})
from statekeeper import StateStore
async def main():
    async with StateStore({url!r}) as store:
        print(await store.count_agents(), (await store.load("a9")).data["n"])
asyncio.run(main())
"""

_COLLECTED = """
import asyncio, gc, sys, warnings
sys.path.insert(0, {src!r})
from statekeeper import StateStore, UnflushedWritesWarning
async def main():
    store = StateStore({url!r}, durability="async", flush_interval=3600.0)
    for i in range(3):
        await store.create(f"a{{i}}", data={{"n": i}})
loop = asyncio.new_event_loop()
loop.run_until_complete(main())  # no cancellation of what is left: nothing flushes
loop.close()
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    gc.collect()
found = [w.message for w in seen if isinstance(w.message, UnflushedWritesWarning)]
print(len(found), found[0].agents, found[0].events)
"""


def _run(code: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code.format(src=str(SRC), url=url)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'agents.db'}"
    elif request.param == "postgresql":
        require_postgres()
        schema = namespace(tmp_path, "sk_wbx_")
        try:
            yield f"{POSTGRES_DSN}?schema={schema}"
        finally:
            drop_schema(schema)
    else:
        require_redis()
        prefix = namespace(tmp_path, "sk_wbx_") + ":"
        try:
            yield f"{REDIS_URL}?prefix={prefix}"
        finally:
            delete_prefix(prefix)


def test_an_unclosed_async_store_writes_its_buffer_when_asyncio_run_ends(url: str) -> None:
    wrote = _run(_WRITE, url)
    assert (wrote.returncode, wrote.stdout, wrote.stderr) == (0, "10\n", "")  # all buffered
    read = _run(_COUNT, url)
    assert (read.returncode, read.stderr) == (0, "")
    assert read.stdout == "10 9\n"  # every acknowledged write was stored at the loop's end


def test_an_unclosed_sync_store_writes_its_buffer_at_interpreter_exit(url: str) -> None:
    """A ``SyncStateStore`` runs its store on a daemon thread's loop: left open, its
    buffered writes were dropped when the interpreter ended, silently."""
    wrote = _run(_SYNC_WRITE, url)
    assert (wrote.returncode, wrote.stdout, wrote.stderr) == (0, "10\n", "")
    read = _run(_COUNT, url)
    assert (read.returncode, read.stderr) == (0, "")
    assert read.stdout == "10 9\n"


def test_an_unclosed_sync_store_leaves_no_task_pending_at_interpreter_exit(url: str) -> None:
    """Flushed at exit but never closed, a ``SyncStateStore``'s PostgreSQL store left
    its pool's workers and its backend's watcher pending on the facade's loop: when the
    interpreter's teardown collected them (about one exit in three under load), asyncio
    printed "Task was destroyed but it is pending!" for each. It is closed at exit now."""
    wrote = _run(_SYNC_COLLECTED, url)
    assert (wrote.returncode, wrote.stdout, wrote.stderr) == (0, "10\n", "")
    read = _run(_COUNT, url)
    assert (read.returncode, read.stderr, read.stdout) == (0, "", "10 9\n")


def test_a_store_collected_with_writes_buffered_warns_how_many_were_lost(tmp_path: Path) -> None:
    done = _run(_COLLECTED, f"sqlite:///{tmp_path / 'agents.db'}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 3 3\n"  # one warning: 3 agents, 3 events never written
    assert "3 buffered event(s) of 3 agent(s) never written" in done.stderr  # and logged
