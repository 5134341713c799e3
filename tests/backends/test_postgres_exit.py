"""A store on PostgreSQL left open when its event loop (or the interpreter) ends, on a
server out of connections ("too many clients already"), exits in bounded time: its
buffered writes are stored when a connection can be had, and named as lost when none
can — never a hang, never a silent loss.

Before, an unclosed ``StateStore`` with ``durability="async"`` whose pool had lost its
connections:

* lost its buffered writes even when the server freed a slot as ``asyncio.run``
  ended: the pool's workers, which make new connections, were cancelled with the
  loop's other tasks, so the exit flush waited a minute (``pool_timeout`` within
  ``retry_timeout``) for a connection nobody would make;
* never exited when a pool worker was connecting as ``asyncio.run`` ended:
  psycopg_pool's worker swallows the ``CancelledError`` of the task it runs and then
  waits on its queue forever, and ``asyncio.run`` waits for it.

Each test runs its own server (:mod:`._exhausted`), never the shared one.
"""

from __future__ import annotations

import asyncio

import pytest

from statekeeper import StateStore

from ._exhausted import Child, Exhausted, exhausted_server

pytestmark = pytest.mark.slow  # (a private server each)

_ASYNC = """
from statekeeper import StateStore
async def main():
    LOOPS.append(asyncio.get_running_loop())
    store = StateStore({url!r}, durability="async", flush_interval=3600.0)  # never closed
    for i in range(3):
        await store.create(f"a{{i}}", data={{"n": i}})
    print(store.stats().buffered, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    KEPT.append(asyncio.ensure_future(say_ending()))  # (a task nobody holds may be collected)
    await asyncio.sleep(0)  # (say_ending waits from now on)
    if {connecting!r}:
        backend = store.backend
        pool = getattr(backend, "inner", backend)._pool
        begun = pool.get_stats().get("connections_num", 0)
        KEPT.append(asyncio.ensure_future(store.load("nobody")))  # the pool dials for it
        while pool.get_stats().get("connections_num", 0) == begun:
            await asyncio.sleep(0.01)  # until the pool's worker is connecting
asyncio.run(main())
print("exited", flush=True)
"""

_SYNC = """
from statekeeper import SyncStateStore
store = SyncStateStore({url!r}, durability="async", flush_interval=3600.0)  # never closed
for i in range(3):
    store.create(f"a{{i}}", data={{"n": i}})
print(store.stats().buffered, flush=True)
sys.stdin.readline()
print("exiting", flush=True)
"""


async def _stored(dsn: str) -> tuple[int, list[int]]:
    async with StateStore(dsn) as store:
        found = [(await store.load(f"a{i}")).data["n"] for i in range(3)]
        return await store.count_agents(), found


def _check_stored(pg: Exhausted) -> None:
    pg.release()
    assert asyncio.run(_stored(pg.server.dsn)) == (3, [0, 1, 2])


def test_an_unclosed_async_store_writes_its_buffer_when_a_connection_frees_at_loop_end() -> None:
    with exhausted_server() as pg:
        child = Child(_ASYNC.format(url=pg.url(), connecting=False))
        child.expect("3")  # 3 writes acknowledged, all buffered
        pg.take_all()  # its connections ended, and no slot left for a new one
        child.say()
        child.expect("ending")  # asyncio.run is cancelling what is left
        pg.free_one()  # a connection can be had again
        code, out, err = child.exit()
        assert (code, out) == (0, "exited\n"), err
        assert "lost" not in err, err
        _check_stored(pg)  # every acknowledged write, none dropped


def test_an_unclosed_async_store_exits_naming_what_it_could_not_write() -> None:
    """The server refuses every connection, each only after a while: a pool worker is
    connecting when ``asyncio.run`` ends. The process exits (it hung forever), and
    says which agents' writes were lost, as a typed warning."""
    with exhausted_server() as pg:
        child = Child(_ASYNC.format(url=pg.url(), connecting=True))
        child.expect("3")
        pg.take_all()
        pg.slow_connections(3)  # a refusal comes 3 s after the attempt began
        child.say()
        child.expect("ending")
        code, out, err = child.exit()
        assert (code, out) == (0, "exited\n"), err
        assert "UnflushedWritesWarning" in err, err
        assert "could not write 3 buffered event(s) of 3 agent(s) ('a0', 'a1', 'a2')" in err


def test_an_unclosed_sync_store_writes_its_buffer_when_a_connection_frees_at_exit() -> None:
    """The sync face flushes from an interpreter-exit hook while its loop (and so its
    pool's workers) still runs: the pool makes the connection once a slot is free."""
    with exhausted_server() as pg:
        child = Child(_SYNC.format(url=pg.url()))
        child.expect("3")
        pg.take_all()
        child.say()
        child.expect("exiting")
        pg.free_one()
        code, out, err = child.exit()
        assert (code, out) == (0, ""), err
        assert "lost" not in err, err
        _check_stored(pg)


def test_an_unclosed_sync_store_exits_naming_what_it_could_not_write() -> None:
    """No connection can be had at interpreter exit: the exit flush gives up within
    seconds (it retried for ``pool_timeout`` within ``retry_timeout``, a minute by
    default) and says which agents' writes were lost, as a typed warning (each
    failure was only logged, and the ``WriteBufferError`` that named them dropped)."""
    with exhausted_server() as pg:
        child = Child(_SYNC.format(url=pg.url()))
        child.expect("3")
        pg.take_all()
        child.say()
        child.expect("exiting")
        code, out, err = child.exit()
        assert (code, out) == (0, ""), err
        assert "UnflushedWritesWarning" in err, err
        assert "could not write the buffered writes of 3 agent(s) ('a0', 'a1', 'a2')" in err
        assert "within 10s" in err  # (retried for seconds, not for retry_timeout's 30)
