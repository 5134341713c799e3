"""A saver closed from code running on its own loop: a typed error or a clean close, never a hang.

``close()`` (and a ``with`` block's exit) called from code the saver's loop runs — a
coroutine handed to it, a callback on it — asked that loop for the store's close and
then stopped it: ``SharedLoop.stop()`` joined the background thread running the very
code that called it, or waited for the loop's runner to leave, itself. ``aclose()``
there (an ``async with`` exited inside the loop's own task) closed the store in place,
then waited in a worker thread for that same stop: the coroutine awaiting it was the
loop's work, so the stop never came. Both hung for ever.

Now:

* ``close()`` there raises :class:`ConfigurationError` at once, before anything changed:
  the saver stays open and working (close it from outside the loop, or ``aclose`` it);
* ``aclose()`` there closes cleanly: the store is closed in place (buffered
  write-behind checkpoints committed first), calls made from then on are refused with
  a typed error, and the loop ends on a thread of its own once control has left it;
* ``SharedLoop.stop()`` itself raises :class:`ConfigurationError` there;
* a saver bound to the application's loop (``afrom_url``) whose sync ``close()`` is
  called on that loop raises the same error and stays open: it was marked closed
  with its store left open, and ``aclose`` then returned without closing the store.

Each body runs on a thread of its own that the test waits for with a deadline: a hang
fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.errors import ConfigurationError, StatekeeperError, StoreClosed
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.store.shared_loop import SharedLoop

T = TypeVar("T")

#: how long a body may take before it counts as hung (a bound, not a measure)
_BOUND = 60.0

_THREAD: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _within(body: Callable[[], T]) -> T:
    """``body()`` run on a thread of its own; fails the test when it has not returned
    within ``_BOUND`` seconds (the thread, hung, is left behind: a daemon)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = body()
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    runner = threading.Thread(target=run, name="close-on-loop-body", daemon=True)
    runner.start()
    runner.join(_BOUND)
    assert not runner.is_alive(), f"hung: not done within {_BOUND} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def _checkpoint(step: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": step}
    checkpoint["channel_versions"] = {"n": step + 1}
    return checkpoint


def _put(saver: StatekeeperSaver, step: int) -> None:
    saver.put(_THREAD, _checkpoint(step), {"source": "input", "step": step}, {"n": step + 1})


def _stored(url: str) -> Any:
    """The latest checkpoint's values, read by a new saver."""
    with StatekeeperSaver.from_url(url, fork_protection=False) as reader:
        found = reader.get_tuple(_THREAD)
        return None if found is None else found.checkpoint["channel_values"]


def _saver(tmp_path: Path) -> tuple[StatekeeperSaver, str]:
    url = f"sqlite:///{tmp_path}/lg.db"
    # (write-behind: a checkpoint stays buffered until a flush or the close)
    saver = StatekeeperSaver.from_url(
        url, fork_protection=False, durability="async", flush_interval=3600.0
    )
    return saver, url


def _wait_closed(portal: Any) -> None:
    deadline = time.monotonic() + _BOUND
    while not portal._loop.is_closed():
        assert time.monotonic() < deadline, "the loop never closed"
        time.sleep(0.005)
    if portal._started:
        portal._thread.join(_BOUND)
        assert not portal._thread.is_alive()


@pytest.mark.parametrize("runner", ["caller", "background"])
def test_close_on_the_savers_loop_is_refused_at_once_and_the_saver_stays_open(
    tmp_path: Path, runner: str
) -> None:
    """``close()`` and a ``with`` block's exit, from a coroutine the loop runs on the
    calling thread (a sync call's) or on its background thread (an async call's)."""
    saver, url = _saver(tmp_path)
    _put(saver, 0)
    refused: list[BaseException] = []

    async def on_loop() -> None:
        with pytest.raises(ConfigurationError, match="aclose") as caught:
            saver.close()
        refused.append(caught.value)
        with pytest.raises(ConfigurationError), saver:
            pass
        assert saver._portal.running

    if runner == "caller":
        _within(lambda: saver._portal.call(on_loop()))
    else:
        _within(lambda: asyncio.run(saver._portal.run(on_loop())))
    assert refused
    _put(saver, 1)  # still open and working
    assert saver.store.stats().buffered > 0
    saver.close()
    _wait_closed(saver._portal)
    assert _stored(url) == {"n": 1}  # nothing buffered lost


@pytest.mark.parametrize("runner", ["caller", "background"])
def test_aclose_on_the_savers_loop_closes_cleanly(tmp_path: Path, runner: str) -> None:
    """``aclose()`` (an ``async with`` exited) inside the loop's own task: the store is
    closed in place with the buffered checkpoint committed, later calls are refused with
    a typed error, and the loop ends once control has left it."""
    saver, url = _saver(tmp_path)
    seen: dict[str, Any] = {}

    async def on_loop() -> None:
        async with saver:
            await saver.aput(_THREAD, _checkpoint(3), {"source": "input", "step": 3}, {"n": 4})
            seen["buffered"] = saver.store.stats().buffered
        saver.close()  # (closed already, its loop stopping: returns)
        saver._portal.stop()  # (stopping already: returns, the stop goes on elsewhere)
        seen["stored"] = await asyncio.to_thread(_stored, url)  # committed by the close
        with pytest.raises(StatekeeperError):  # refused from then on, on the loop too
            await saver.aget_tuple(_THREAD)
        seen["running"] = saver._portal.running

    if runner == "caller":
        _within(lambda: saver._portal.call(on_loop()))
    else:
        _within(lambda: asyncio.run(saver._portal.run(on_loop())))
    assert seen.pop("buffered") > 0
    assert seen == {"stored": {"n": 3}, "running": False}
    _within(lambda: _wait_closed(saver._portal))
    with pytest.raises(StoreClosed):
        _put(saver, 4)
    saver.close()  # (idempotent)
    assert _stored(url) == {"n": 3}


def test_stopping_a_shared_loop_from_code_it_runs_is_refused() -> None:
    loop = SharedLoop("test-close-on-loop")

    async def on_loop() -> str:
        with pytest.raises(ConfigurationError):
            loop.stop()
        return "still running"

    assert _within(lambda: loop.call(on_loop())) == "still running"
    assert _within(lambda: asyncio.run(loop.run(on_loop()))) == "still running"
    assert loop.running
    loop.stop()
    _wait_closed(loop)


def test_a_bound_savers_sync_close_on_its_loop_leaves_it_open(tmp_path: Path) -> None:
    """``afrom_url``: ``close()`` on the bound loop raises; ``aclose`` then closes the
    store (it was left open: the buffered checkpoint was only written by the loop's end)."""
    url = f"sqlite:///{tmp_path}/lg.db"

    async def main() -> dict[str, Any]:
        saver = await StatekeeperSaver.afrom_url(
            url, fork_protection=False, durability="async", flush_interval=3600.0
        )
        await saver.aput(_THREAD, _checkpoint(5), {"source": "input", "step": 5}, {"n": 6})
        with pytest.raises(ConfigurationError):
            saver.close()
        running = saver._portal.running
        await saver.aclose()
        return {"running": running, "stored": await asyncio.to_thread(_stored, url)}

    assert _within(lambda: asyncio.run(main())) == {"running": True, "stored": {"n": 5}}
