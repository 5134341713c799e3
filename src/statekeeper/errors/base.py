"""The root of the hierarchy and the errors of a setting or argument that cannot be used.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StatekeeperError(Exception):
    """Root of every error statekeeper raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce rebuilds an error as ``cls(*self.args)``; most of ours
        # take their fields, not the message, so a pickled copy (an error crossing a
        # process: multiprocessing, concurrent.futures, pytest-xdist) came back wrong
        # (``UnsavedChangesWarning`` listed the letters of its message as agent ids) or
        # failed to unpickle. Rebuild from the fields instead, without calling __init__.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[StatekeeperError], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    """The other half of :meth:`StatekeeperError.__reduce__`."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class ConfigurationError(StatekeeperError, ValueError):
    """A setting, URL or argument cannot be used (raised before anything is written)."""


class RewriteBelowPrunedBase(ConfigurationError):
    """A rewrite (a key rotation, a migration, a redaction) names a record of
    ``agent_id`` at ``seq`` below the stream's pruned base ``base``: an event not stored
    (``record`` ``"event"``) or a snapshot the prune removed (``"snapshot"``). Raised by
    every engine inside the rewrite's atomic step, nothing of the rewrite written: the
    rewrite was planned before a retention prune, and planned again on a fresh read it
    applies (``statekeeper rekey`` and ``migrate`` do, a bounded number of times).
    S3 alone (no atomic step over its objects) may find it after some of the rewrite's
    writes landed (a prune under it): it then says "part-way" and sets
    ``maybe_applied`` (an attribute only then)."""

    #: a rekey that gave up on the stream after this many walks, each refused so
    #: (``statekeeper rekey`` says it); None: raised by one rewrite
    walks: int | None = None

    def __init__(self, agent_id: str, seq: int, base: int, record: str = "snapshot") -> None:
        self.agent_id, self.seq, self.base, self.record = agent_id, seq, base, record
        if record == "event":
            message = (
                f"agent {agent_id!r}: cannot rewrite event seq {seq}: it is not stored"
                f" (events up to seq {base} were pruned)"
            )
        else:
            message = (
                f"agent {agent_id!r}: cannot rewrite the snapshot at seq {seq}: it was"
                f" pruned (the stream's base is seq {base}; a rewrite planned before the"
                " prune must be planned again)"
            )
        super().__init__(message)


class InvalidArgument(ConfigurationError, TypeError):
    """An argument of a public call cannot be used (wrong type, out of range, malformed).

    ``argument`` names it (``"data"``, ``"fsm_state"``, ``"ops[2].path"``...). Raised
    before anything is written.
    """

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)


class ClockDriftExceeded(InvalidArgument):
    """A stamp from another node (``remote``, its node id) is ``ahead_ms`` milliseconds
    ahead of this node's wall clock, more than the clock's ``max_drift_ms`` allows
    (:class:`~statekeeper.concurrency.HybridClock`). Taking it would move every later
    stamp of this clock past it, so later real edits would lose last-write-wins races to
    it. Refused: the clock did not move. Fix the remote node's clock, or give the clock
    a larger ``max_drift``."""

    def __init__(self, remote: str, ahead_ms: int, max_drift_ms: int) -> None:
        self.remote = remote
        self.ahead_ms = ahead_ms
        self.max_drift_ms = max_drift_ms
        super().__init__(
            "remote",
            f"a stamp from node {remote!r} is {ahead_ms / 1000:.3f} s ahead of this clock's"
            f" wall time, more than its max_drift of {max_drift_ms / 1000:g} s: refused, the"
            " clock did not move (fix that node's clock, or raise max_drift)",
        )


class FutureStampRefused(ClockDriftExceeded):
    """A last-writer-wins entry (``key`` of an :class:`~statekeeper.concurrency.LWWMap`,
    None for an :class:`~statekeeper.concurrency.LWWRegister`; ``field``: the document
    field it sits in, when a merge of documents met it) bears ``stamp`` (``[wall,
    logical, node]``), ``ahead_ms`` milliseconds ahead of this node's wall clock, more
    than ``max_drift_ms`` allows. Such a stamp would win every later write to that key
    until real time caught up with it: every later edit silently lost.

    ``stored`` False: the stamp arrived (a merge of another replica's state, a write
    with a hand-made stamp) and was refused, nothing merged. ``stored`` True: the state
    already held it (stored data stays readable) and a write to that key would have
    lost to it: refused instead of dropped silently. ``without_future()`` removes such
    entries from a state."""

    def __init__(
        self,
        key: str | None,
        stamp: list[Any],
        ahead_ms: int,
        max_drift_ms: int,
        *,
        stored: bool = False,
        field: str | None = None,
    ) -> None:
        super().__init__(str(stamp[2]), ahead_ms, max_drift_ms)
        self.key = key
        self.stamp = stamp
        self.stored = stored
        self.field = field
        where = "the register" if key is None else f"key {key!r}"
        if field is not None:
            where += f" of field {field!r}"
        ahead = f"{ahead_ms / 1000:.3f} s ahead of this node's wall clock"
        limit = f"more than max_drift ({max_drift_ms / 1000:g} s)"
        if stored:
            text = (
                f"{where} holds stamp {stamp} (node {stamp[2]!r}), {ahead}, {limit}: this"
                " write would silently lose to it; refused. Remove such entries with"
                " without_future() (or raise max_drift), then write again"
            )
        else:
            text = (
                f"{where} arrives with stamp {stamp} (node {stamp[2]!r}), {ahead}, {limit}:"
                " it would win every later write to it; refused, nothing merged (fix that"
                " node's clock and its state: without_future(), or raise max_drift)"
            )
        self.args = (text,)

    def in_field(self, field: str) -> FutureStampRefused:
        """This error, said of the document field ``field`` it was met in."""
        return FutureStampRefused(
            self.key,
            self.stamp,
            self.ahead_ms,
            self.max_drift_ms,
            stored=self.stored,
            field=field,
        )


class CounterOverflow(InvalidArgument):
    """A counter slot (node ``node`` of a G-counter, or of one half of a PN-counter)
    would hold ``count``, more than ``limit`` (2**64 - 1): agent data is stored through
    codecs whose integers are 64-bit, so a larger count could not be saved (or would come
    back different). Refused: the counter is unchanged."""

    def __init__(self, node: str, count: int, limit: int) -> None:
        self.node = node
        self.count = count
        self.limit = limit
        super().__init__(
            "by",
            f"counter slot of node {node!r} would reach {count}, more than {limit}"
            " (2**64 - 1, the largest integer agent data can store): refused, the counter"
            " is unchanged",
        )


class InvalidAgentId(InvalidArgument):
    """An agent id that not every backend can store: not a non-empty ``str``, not valid
    UTF-8 (a lone surrogate), containing NUL, or longer than 1,024 bytes in UTF-8.

    Every backend refuses the same ids, so an agent can always be moved between them —
    except where an engine's keys cannot hold the longest (``Backend.max_id_bytes``: an
    S3 store's 1,024-byte object keys hold ids up to about 475 bytes), which refuses a
    longer one naming its length and the limit, before anything is written.
    """

    def __init__(self, message: str, argument: str = "agent_id") -> None:
        super().__init__(argument, message)


class NonNormalAgentId(InvalidAgentId):
    """A new agent's id with an empty, ``.`` or ``..`` segment (``tb//x``, ``tb/x/``,
    ``/x``, ``./x``, ``tb/../ta/x``): such an id reads as a path to resolve, and its
    namespace (everything before its last ``/``) is one no namespace filter, policy
    pattern or namespaced store names as it reads. Refused when it would create an
    agent; one stored before stays readable, exportable, writable and deletable."""

    def __init__(self, message: str, agent_id: str, argument: str = "agent_id") -> None:
        self.agent_id = agent_id
        super().__init__(message, argument)


def _label(value: Any) -> str:
    return str(getattr(value, "value", value))


class ThreadStillRunning(StatekeeperError):
    """Cancelled a second time while waiting for a thread that was asked to stop and
    has not (a write the kernel does not give back: a stalled network file system, a
    device): the wait is given up, the thread still runs. ``holds`` names what it
    holds; nothing of it was closed under the thread: it is closed (a temporary file
    removed) when the thread ends, or by the process's exit."""

    def __init__(
        self, holds: str, handed: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        self.holds = holds
        self._handed = handed
        super().__init__(
            f"cancelled again: not waiting any more for the thread of {holds}, which was"
            " asked to stop and still runs; what it holds is released when it ends"
        )

    def after(self, release: Callable[[], None]) -> None:
        """``release()`` once the thread has ended (by the thread), or now if it has."""
        if self._handed is None:
            release()
        else:
            self._handed(release)
