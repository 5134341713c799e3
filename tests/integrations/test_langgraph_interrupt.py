"""Ctrl-C during a sync saver call (the saver runs its loop on the calling thread).

A ``KeyboardInterrupt`` raised inside the saver's own bookkeeping once left the loop
marked as run by the interrupted thread: every later call raised "a blocking saver
call from inside the saver's loop would deadlock" and ``close`` (and so the process's
exit) waited for that thread forever. What a user relies on, checked here with the
interrupt raised deterministically at each point in turn (no timing):

* the interrupted call raises ``KeyboardInterrupt``;
* afterwards the saver works, and the thread's latest checkpoint is the last one
  acknowledged or the interrupted one, complete (nothing acknowledged lost, nothing
  half-applied);
* the saver closes, and a process interrupted this way exits.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.store import shared_loop as loop_module

_LOOP_FILE = loop_module.__file__


@contextmanager
def _at(
    nth: int, events: tuple[str, ...], where: Callable[[Any], bool], act: Callable[[], None]
) -> Iterator[list[int]]:
    """Within: ``act()`` at the ``nth`` trace event in ``events`` of a frame ``where``
    accepts (``call``: a function entered or a coroutine resumed, each call boundary
    and await point; ``return``: one returning or suspended). Not ``line`` events: one
    at a ``with`` statement's exit comes before the lock's ``__exit__``, which an
    exception raised there skips (a limit of CPython's, bpo-29988, not the saver's)."""
    seen = [0]

    def local(frame: Any, ev: str, arg: Any) -> Any:
        if ev in events:
            seen[0] += 1
            if seen[0] == nth:
                act()
        return local

    def tracer(frame: Any, ev: str, arg: Any) -> Any:
        if not where(frame):
            return None
        return local(frame, ev, arg) if ev == "call" else local

    sys.settrace(tracer)
    try:
        yield seen
    finally:
        sys.settrace(None)


def _in_statekeeper(frame: Any) -> bool:
    return str(frame.f_globals.get("__name__", "")).startswith("statekeeper.")


def _in_loop_module(frame: Any) -> bool:
    return bool(frame.f_code.co_filename == _LOOP_FILE)


#: each function of the saver's loop entered or left (taking the loop, stepping, leaving)
_EDGES = ("call", "return")


def _interrupt() -> None:
    raise KeyboardInterrupt


def _sigint() -> None:
    signal.raise_signal(signal.SIGINT)


def _checkpoint(step: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": step}
    checkpoint["channel_versions"] = {"n": step + 1}
    return checkpoint


def _interrupt_each_point(
    saver: StatekeeperSaver, events: tuple[str, ...], where: Any, act: Any
) -> int:
    """Interrupt a ``put`` at its 1st, 2nd … point until one runs with fewer points;
    after each, the saver works and holds what was acknowledged. Returns the number
    of interrupted puts."""
    thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    config = saver.put(thread, _checkpoint(0), {"source": "input", "step": -1}, {})
    acked = config["configurable"]["checkpoint_id"]
    interrupted = 0
    for nth in range(1, 5000):
        checkpoint = _checkpoint(nth)
        with _at(nth, events, where, act) as seen:
            try:
                config = saver.put(
                    config, checkpoint, {"source": "loop", "step": nth}, {"n": nth + 1}
                )
            except KeyboardInterrupt:
                raised = True
            else:
                raised = False
        if seen[0] < nth:  # this put had fewer points: every one was tried
            assert not raised
            return interrupted
        if not raised:  # (an interrupt raised where the saver catches it is not one)
            acked = checkpoint["id"]
            continue
        interrupted += 1
        latest = saver.get_tuple(thread)  # the saver works after the interrupt
        assert latest is not None
        got = latest.checkpoint
        assert got["id"] in (acked, checkpoint["id"]), nth
        if got["id"] == checkpoint["id"]:  # the interrupted put landed, complete
            assert got["channel_values"] == {"n": nth}
            assert latest.metadata["step"] == nth
            acked = checkpoint["id"]
        config = latest.config
    raise AssertionError("a put never ran out of points")


@pytest.fixture
def sqlite_saver(tmp_path: Path) -> Iterator[StatekeeperSaver]:
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", fork_protection=False)
    yield saver
    saver.close()  # returns: no thread is left marked as running the loop


def test_an_interrupt_at_each_edge_of_the_loop_leaves_the_saver_working(
    sqlite_saver: StatekeeperSaver,
) -> None:
    """A ``KeyboardInterrupt`` as each function of the saver's loop is entered or
    left during a ``put`` (taking the loop, stepping it, leaving it): on main, one
    just after the loop was taken left it taken, and every later call raised
    RuntimeError."""
    assert _interrupt_each_point(sqlite_saver, _EDGES, _in_loop_module, _interrupt) > 5


def test_a_ctrl_c_at_each_call_and_await_of_a_put_stops_it_at_a_safe_point(
    sqlite_saver: StatekeeperSaver,
) -> None:
    """A real SIGINT (default handler) raised as each function of statekeeper's is
    entered or each of its coroutines resumed during a ``put``: the put raises
    ``KeyboardInterrupt``; its checkpoint is stored whole or not at all.

    Python's default handler is installed for the test, as in an interactive
    process: a process started in the background (CI's runner) inherits SIGINT
    ignored, and then there is no Ctrl-C to hold."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert _interrupt_each_point(sqlite_saver, ("call",), _in_statekeeper, _sigint) > 20
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, inherited)


_CHILD = """
import sys
sys.path[:0] = {paths!r}
from statekeeper.integrations.langgraph import StatekeeperSaver
import test_langgraph_interrupt as t

saver = StatekeeperSaver.from_url({url!r}, fork_protection=False)
print(t._interrupt_each_point(saver, t._EDGES, t._in_loop_module, t._interrupt), flush=True)
# the saver is not closed: exit closes it (and must not wait for the loop)
"""


def test_a_process_interrupted_in_the_saver_exits(tmp_path: Path) -> None:
    src = str(Path(loop_module.__file__).parents[2])
    here = str(Path(__file__).parent)
    code = _CHILD.format(paths=[src, here], url=f"sqlite:///{tmp_path}/child.db")
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,  # (a safety net for a hang, not a measure)
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert int(child.stdout.split()[-1]) > 5
