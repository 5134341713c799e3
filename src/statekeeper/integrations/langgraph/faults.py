"""The saver's own errors: those fork protection raises (:class:`CheckpointForkError`,
:class:`ThreadBusyError`), :class:`ThreadNotFound` and :class:`ThreadFormatTooNew`."""

from __future__ import annotations

from ...errors import AgentNotFound, ConflictError, StorageError


class CheckpointForkError(ConflictError):
    """A ``put`` would fork a thread: its parent is not the namespace's latest checkpoint.

    Raised only with ``fork_protection=True``. Nothing was written. ``parent_id`` is
    the parent the caller named, ``latest_id`` the thread's latest checkpoint.
    """

    def __init__(
        self,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        latest_id: str | None,
        agent_id: str,
        seq: int,
    ) -> None:
        super().__init__(agent_id, seq, seq)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_id = parent_id
        self.latest_id = latest_id
        # its own message, not ConflictError's for a head seq equal to the one expected
        # ("its head record was rewritten … by `statekeeper migrate`"): repr() and args
        self.args = (str(self),)

    def __str__(self) -> str:
        return (
            f"thread {self.thread_id!r} namespace {self.checkpoint_ns!r}: a checkpoint with "
            f"parent {self.parent_id!r} would fork the thread; its latest checkpoint is "
            f"{self.latest_id!r} (fork_protection is on)"
        )


class ThreadBusyError(CheckpointForkError):
    """Another run holds the thread: this call would interleave with it.

    Raised with ``fork_protection`` on: by ``get_tuple`` at the start of a LangGraph run
    (so the run fails before any node runs and before it writes anything) — for a
    ``durability="sync"`` run given fresh input, whose claim rides on its input
    checkpoint, by that checkpoint's ``put`` (still before any node ran) — and by a
    ``put`` / ``put_writes`` from outside that run (e.g. ``update_state``). Nothing was
    written. ``expires_at`` (Unix time) is when the holder's claim lapses unless its
    run renews it; ``lost`` is True when the failing call's *own* run had its claim
    taken over (it expired, or the thread was deleted or pruned meanwhile).
    """

    def __init__(
        self, thread_id: str, expires_at: float | None, agent_id: str, seq: int, *, lost: bool
    ) -> None:
        self.expires_at = expires_at
        self.lost = lost
        super().__init__(thread_id, "", None, None, agent_id, seq)

    def __str__(self) -> str:
        if self.lost:
            return (
                f"thread {self.thread_id!r}: this run no longer holds the thread (its claim "
                "lapsed and another run took it, or the thread was deleted or pruned); "
                "nothing more was written"
            )
        left = "" if self.expires_at is None else f" (its claim lapses at {self.expires_at:.0f}"
        left += " unless that run renews it)" if left else ""
        return (
            f"thread {self.thread_id!r} is held by another run{left}; nothing was written "
            "(fork_protection is on: retry when that run has finished)"
        )


class ThreadNotFound(AgentNotFound):
    """No checkpoint of thread ``thread_id`` is stored under the saver's ``prefix``
    (a mistyped id, a thread deleted or never run, or another prefix). An
    :class:`~statekeeper.errors.AgentNotFound` (the CLI's exit code 1); nothing was
    changed."""

    def __init__(self, thread_id: str, prefix: str = "lg/", *, source: bool = False) -> None:
        super().__init__(f"{prefix}{thread_id}")
        self.thread_id = thread_id
        self.prefix = prefix
        #: named for ``langgraph import`` / ``export``: not in the database copied from
        self.source = source

    def __str__(self) -> str:
        if self.source:
            return (
                f"LangGraph thread {self.thread_id!r} not found: the source holds no "
                "checkpoint of it; nothing was copied"
            )
        return (
            f"LangGraph thread {self.thread_id!r} not found: no checkpoint of it is stored "
            f"under the prefix {self.prefix!r}; nothing was changed"
        )


class ThreadFormatTooNew(StorageError):
    """A thread's stream was written in a newer format of the saver's document
    (``stored``, above ``supported``, this statekeeper's): a newer statekeeper wrote it,
    during a rolling deploy for instance. This saver neither reads nor writes it —
    read as its own format, its checkpoints could be misread, and its writes made on a
    layout it does not know. Upgrade statekeeper in this process; nothing was changed."""

    def __init__(self, thread_id: str, agent_id: str, stored: int, supported: int) -> None:
        self.thread_id = thread_id
        self.agent_id = agent_id
        self.stored = stored
        self.supported = supported
        super().__init__(
            f"LangGraph thread {thread_id!r} (stream {agent_id!r}) is stored in saver "
            f"format {stored}, newer than this statekeeper's {supported}: written by a "
            "newer statekeeper; upgrade it in this process (nothing was changed)"
        )
