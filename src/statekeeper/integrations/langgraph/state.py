"""The saver's options and state (``__init__``), shared by the mixins that make up
:class:`~.saver.StatekeeperSaver` (see :mod:`.saver` for which module holds what)."""

from __future__ import annotations

import asyncio
import builtins
import math
import threading
import time
from collections import OrderedDict
from collections.abc import (
    Callable,
    Iterable,
)
from typing import Any

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...arguments import id_shape_problem
from ...backends.keyed_locks import KeyedLock
from ...backends.memory import MemoryBackend
from ...backends.sqlite import SQLiteBackend
from ...errors import ConfigurationError
from ...store.store import StateStore
from ...store.sync_exit import close_at_exit
from . import runs
from .loop import BoundLoop, SharedLoop
from .serde import ValueCodec, safe_serializer
from .stream import Loading, _Count, _Pending, _Stream

#: the saver's loop (a name kept for the inspector, which runs a saver on its own loop)
_SaverPortal = SharedLoop


def _close_at_exit(saver: Any) -> Callable[[], None]:
    """Close ``saver`` at interpreter exit unless it was closed (or collected) before.

    An application that never closes its saver otherwise leaves the saver's loop, with
    the store's tasks on it (a PostgreSQL pool's workers), to be collected at exit:
    asyncio prints "Task was destroyed but it is pending!" for each, and the store
    never flushes or closes. ``close`` (see :meth:`.saver.StatekeeperSaver.close`)
    unregisters it. Its store (when the saver owns it) is flushed before Python stops
    its thread pools (the atexit close runs after they stopped): the exit hooks an
    unclosed SyncStateStore uses too."""
    return close_at_exit(saver, flush=saver._owns_store)


def check_saver_options(
    *, prefix: str = "lg/", writes_wait: float = 0.005, run_lease: float = 30.0, **_: Any
) -> None:
    """Raise :class:`ConfigurationError` naming a saver option the saver refuses
    (``from_url`` asks before it opens a store, so a refused call leaves nothing open
    or created)."""
    if not prefix or "#" in prefix:
        raise ConfigurationError("prefix must be non-empty and must not contain '#'")
    if (problem := id_shape_problem(f"{prefix}t#0", "thread agent id")) is not None:
        raise ConfigurationError(  # ("lg//", "../lg/": refused when a thread is created)
            f"prefix {prefix!r} makes ids no agent may be created under: {problem}"
        )
    # finite: an infinite or NaN lease was accepted here, then every run failed on
    # its claim (a non-finite float cannot be stored); a NaN wait held no write and
    # an infinite one overflowed the parked write's lock timeout
    if not math.isfinite(writes_wait) or writes_wait < 0:
        raise ConfigurationError(
            f"writes_wait must be a finite number >= 0 seconds, got {writes_wait!r}"
        )
    if not math.isfinite(run_lease) or run_lease <= 0:
        raise ConfigurationError(
            f"run_lease must be a finite number > 0 seconds, got {run_lease!r}"
        )


class _SaverState(BaseCheckpointSaver[int]):
    """Options and state of a saver (the base of every saver mixin)."""

    def __init__(
        self,
        store: StateStore,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[type[Any] | tuple[str, str]] = (),
        native_json: bool = True,
        fork_protection: bool = True,
        prefix: str = "lg/",
        cache_size: int = 1024,
        max_retries: int = 16,
        snapshot_min_bytes: int = 16 * 1024,
        reuse_packed_messages: bool = True,
        run_lease: float = 30.0,
        clock: Callable[[], float] = time.time,
        writes_wait: float = 0.005,
        _portal: _SaverPortal | BoundLoop | None = None,
        _owns_store: bool = False,
    ) -> None:
        super().__init__(serde=serde or safe_serializer(allowed_types))
        check_saver_options(prefix=prefix, writes_wait=writes_wait, run_lease=run_lease)
        self.store = store
        #: a plain StateStore's write pipeline, whose append takes the document the
        #: saver made (wrapped stores — governed, namespaced — keep their own path)
        self._fast = store._writes if type(store) is StateStore else None
        self.native_json = native_json
        self.fork_protection = fork_protection
        if fork_protection:  # (before any run of this saver starts)
            runs.guard_enter()
        self.prefix = prefix
        self.cache_size = cache_size
        self.max_retries = max_retries
        self.snapshot_min_bytes = snapshot_min_bytes
        self.reuse_packed_messages = reuse_packed_messages
        self._portal = _portal or _SaverPortal("statekeeper-langgraph")
        #: the sync face's writes and reads run bare (no task until they first wait:
        #: :meth:`.loop.SharedLoop.call`) — on a plain store whose backend sets no
        #: timeout and asks for no task before it first waits (SQLite, memory; the
        #: network backends' ``asyncio.timeout`` needs a task)
        self._sends_bare = (
            type(self._portal) is SharedLoop
            and self._fast is not None
            and type(store.backend) in (SQLiteBackend, MemoryBackend)
        )
        self._owns_store = _owns_store
        self._codec_cache: ValueCodec | None = None
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._locks = KeyedLock()  # one per thread
        #: per thread: marks of its loads in flight, set when the thread is written or
        #: dropped meanwhile (such a load is not cached: see ``_SaverStreams._keep``)
        self._loading: dict[str, builtins.list[Loading]] = {}
        self._queued: dict[str, builtins.list[_Pending]] = {}
        self.writes_wait = writes_wait
        #: per thread: pending writes waiting for the run's next checkpoint to join
        self._waiting: dict[str, builtins.list[asyncio.Future[None]]] = {}
        #: per thread: sync pending writes parked off the loop until the run's next
        #: write takes them into its commit (see ``_SaverCommits._park``); the lock
        #: guards it (callers' threads park, the loop's runner takes)
        self._parked: dict[str, builtins.list[_Pending]] = {}
        self._parking = threading.Lock()
        self.run_lease = run_lease
        self._clock = clock
        #: runs of this process holding (or claiming) a thread, by (id(control), thread)
        self._runs: dict[tuple[int, str], runs.Run] = {}
        #: (thread, ns, checkpoint id) named by get_tuple outside a run: a put forking
        #: from one of them was asked for (update_state on an older checkpoint)
        self._named: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        #: the timer of the next claim renewal; the renewal running (see claims.py)
        self._renewer: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None
        #: tokens of this process's runs that ended (bounded): their claims are not
        #: live, whether their release is still on its way or failed
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._built: OrderedDict[int, _Stream] = OrderedDict()  # (id(view): view)
        #: per thread: the view a write answered "duplicate" dropped, whose snapshot
        #: count its next view takes on (see ``_SaverStreams._carry_count``; bounded)
        self._counts: dict[str, _Count] = {}
        #: the saver's own loop (sync use) is closed at exit if the application does not
        #: close the saver (a bound loop is the application's: its own to end)
        self._at_exit = _close_at_exit(self) if type(self._portal) is SharedLoop else None
