"""Which LangGraph run a saver call belongs to, and where that run ends.

Fork protection claims a thread for a whole run (see ``docs/langgraph.md``). The saver
sees a run only through its calls, so this module reads two things LangGraph passes:

- the run's identity: every call a run makes (``get_tuple`` at its start, then ``put`` /
  ``put_writes`` from the loop's background threads, subgraphs included) carries the
  run's ``Runtime`` under ``configurable["__pregel_runtime"]``, and its ``control`` (a
  ``RunControl``) is created once per top-level run and shared by its subgraphs;
- the run's end: ``get_tuple`` at a run's start is called by the ``PregelLoop``'s
  ``__enter__`` / ``__aenter__``, whose exit stack unwinds when the run ends, after
  the loop's background saves finished. A callback pushed on that stack releases the
  claim at exactly that point; when ``__enter__`` itself fails (the stack then never
  unwinds), a hook the wrapped ``__enter__`` calls does (:func:`guard_enter`).

When either is missing (another caller, another LangGraph version) there is no run:
the saver falls back to checking each ``put`` alone.
"""

from __future__ import annotations

import functools
import secrets
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

__all__ = ["Run", "find_loop", "run_control"]

_RUNTIME_KEY = "__pregel_runtime"
_TASK_KEY = "__pregel_task_id"  # set in the config of a subgraph's (nested) loop


@dataclass(eq=False)
class Run:
    """One top-level LangGraph run holding (or claiming) a thread."""

    thread_id: str
    #: the run's ``RunControl`` (held, so its ``id`` cannot be reused while we key on it)
    control: Any
    #: the run started from a checkpoint the caller named (time travel): it may fork
    addressed: bool
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    #: the claim is stored (until ``released``)
    claimed: bool = False
    released: bool = False
    #: the loop object is gone (its exit stack may never unwind): stop renewing
    dead: bool = False
    #: the run's pending writes may wait for its next checkpoint (see
    #: ``StatekeeperSaver.writes_wait``): LangGraph waits for none of them first
    hold: bool = False
    #: the claim rides on the run's first write instead of a commit of its own (see
    #: :func:`first_write_precedes_nodes`); ``claimed`` once that write is stored
    rides: bool = False
    #: a riding run: the stream's seq when the run read its thread (None: no stream);
    #: its first write is refused when the thread moved on since
    seen: int | None = None
    #: the run's end was seen (its loop exited, or its start failed), maybe before its
    #: claim was stored (a caller that gave up on its ``get_tuple``): a claim stored
    #: after that is released at once, and a riding run's write carries none
    ended: bool = False
    #: the claim was sent in a write whose answer may never come (it failed, maybe
    #: after it landed: a lost reply), before ``claimed``: the run's end reads the
    #: thread and clears the claim if it is stored (see ``_SaverClaims._release``)
    unsure: bool = False

    @property
    def key(self) -> tuple[int, str]:
        return (id(self.control), self.thread_id)


def run_control(configurable: dict[str, Any]) -> Any:
    """The ``RunControl`` of the run making a call, or None."""
    runtime = configurable.get(_RUNTIME_KEY)
    return getattr(runtime, "control", None) if runtime is not None else None


def is_top_level(configurable: dict[str, Any]) -> bool:
    """A call from a top-level run's loop (a subgraph's loop has a task id)."""
    return _TASK_KEY not in configurable and configurable.get(_RUNTIME_KEY) is not None


def find_loop(frame: FrameType | None, depth: int = 4) -> Any:
    """The ``PregelLoop`` calling ``get_tuple`` from ``frame`` up, or None."""
    try:
        from langgraph.pregel._loop import PregelLoop
    except ImportError:  # pragma: no cover - another LangGraph layout
        return None
    for _ in range(depth):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, PregelLoop) and isinstance(
            getattr(candidate, "stack", None), (ExitStack, AsyncExitStack)
        ):
            return candidate
        frame = frame.f_back
    return None


def waits_for_writes(loop: Any) -> bool:
    """Whether ``loop`` may wait for a task's saved writes before its next checkpoint:
    it does for ``DeltaChannel`` writes (before the checkpoint's put) and for the
    writes of a task whose node has an error handler (before the handler runs)."""
    try:
        from langgraph.channels.delta import DeltaChannel
    except ImportError:  # pragma: no cover - a LangGraph without delta channels
        delta: tuple[type[Any], ...] = ()
    else:
        delta = (DeltaChannel,)
    specs = getattr(loop, "specs", None)
    nodes = getattr(loop, "nodes", None)
    if not isinstance(specs, dict) or not isinstance(nodes, dict):
        return True  # another LangGraph layout: assume it may
    if delta and any(isinstance(c, delta) for c in specs.values()):
        return True
    return any(getattr(n, "error_handler_node", None) for n in nodes.values())


def first_write_precedes_nodes(loop: Any) -> bool:
    """Whether the run of ``loop`` stores a write before any node of the graph starts.

    True for a top-level ``durability="sync"`` run of a ``StateGraph`` (its input goes
    to ``START`` only) given fresh input: LangGraph puts the input checkpoint when the
    loop is entered, runs ``START`` alone in step 0, and waits for that step's
    checkpoint — which waits for the input checkpoint's put — before step 1, where the
    graph's nodes start ("changes are persisted synchronously before the next step
    starts"). A claim carried by the run's first write then still refuses a concurrent
    run before any of its nodes ran. Not for ``None`` or a ``Command`` (a resume or a
    continuation may run a node before it writes), a run id the caller passed (it may
    name the latest checkpoint's run: LangGraph re-enters it instead of storing the
    input), other durabilities (nodes run while the input is saved, or before) or
    graphs whose input triggers nodes directly."""
    try:
        from langgraph.constants import START
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - another LangGraph layout
        return False
    if getattr(loop, "durability", None) != "sync" or getattr(loop, "is_nested", True):
        return False
    if getattr(loop, "input_keys", None) != START:
        return False
    given = getattr(loop, "input", None)
    if given is None or isinstance(given, Command):
        return False
    config = getattr(loop, "config", None)
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    return not (isinstance(metadata, Mapping) and "run_id" in metadata)


def caller_frame() -> FrameType:
    """The frame that called the function calling this one."""
    return sys._getframe(2)


def watch(loop: Any, run: Run) -> None:
    """Mark ``run`` dead when its loop object is collected (a loop whose exit stack
    never unwound, e.g. ``__enter__`` raised after the claim): the lease then lapses."""

    def dead(run: Run = run) -> None:
        run.dead = True

    weakref.finalize(loop, dead)


def guard_enter() -> None:
    """Have LangGraph's loops call the hooks of :func:`on_failed_enter` when their
    ``__enter__`` / ``__aenter__`` raises: ``SyncPregelLoop.__enter__`` and
    ``AsyncPregelLoop.__aenter__`` are wrapped, once per process (a saver does it when
    it is made, before any run of it starts). A loop no saver hooked is left as it was
    (one dictionary look-up more per run); a LangGraph without these classes is left
    alone (a claim whose run failed to start then lapses after ``run_lease``)."""
    try:
        from langgraph.pregel._loop import AsyncPregelLoop, SyncPregelLoop
    except ImportError:  # pragma: no cover - another LangGraph layout
        return
    with _guarding:
        enter = SyncPregelLoop.__dict__.get("__enter__")
        if enter is not None and not getattr(enter, _GUARD, False):
            SyncPregelLoop.__enter__ = _guarded(enter)  # type: ignore[method-assign]
        aenter = AsyncPregelLoop.__dict__.get("__aenter__")
        if aenter is not None and not getattr(aenter, _GUARD, False):
            AsyncPregelLoop.__aenter__ = _aguarded(aenter)  # type: ignore[method-assign,assignment]


def on_failed_enter(loop: Any, failed: Callable[[], Awaitable[None] | None]) -> None:
    """Call ``failed`` (and await what it returns, in an async loop) when ``loop``'s
    ``__enter__`` / ``__aenter__`` raises after the run's first ``get_tuple`` began
    (see :func:`guard_enter`). A ``with`` whose ``__enter__`` raised never unwinds the
    exit stack that releases the run's claim, and LangGraph's ``__enter__`` does more
    after that ``get_tuple`` than read: it hydrates the channels (a channel's
    ``from_checkpoint``, a ``DeltaChannel``'s history read, a ``KeyboardInterrupt`` or
    a cancellation meet it there), then ``_first`` refuses the input
    (``EmptyInputError`` for ``invoke(None)`` on a new thread, an empty ``Command``);
    the ``get_tuple`` itself may raise, or be given up by its caller (a cancelled
    ``aget_tuple``) while its claim is stored."""
    loop.__dict__.setdefault(_FAILED, []).append(failed)


#: a loop's hooks for a failed ``__enter__`` (in the loop object's ``__dict__``)
_FAILED = "_statekeeper_failed_enter"
#: marks the wrapped ``__enter__`` / ``__aenter__`` (never wrapped twice)
_GUARD = "_statekeeper_guard"
_guarding = threading.Lock()


def _guarded(enter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        try:
            entered = enter(self)
        except BaseException:
            for failed in self.__dict__.pop(_FAILED, ()):
                failed()
            raise
        self.__dict__.pop(_FAILED, None)
        return entered

    setattr(__enter__, _GUARD, True)
    return __enter__


def _aguarded(aenter: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    @functools.wraps(aenter)
    async def __aenter__(self: Any) -> Any:
        try:
            entered = await aenter(self)
        except BaseException:
            for failed in self.__dict__.pop(_FAILED, ()):
                done = failed()
                if done is not None:
                    await done
            raise
        self.__dict__.pop(_FAILED, None)
        return entered

    setattr(__aenter__, _GUARD, True)
    return __aenter__
