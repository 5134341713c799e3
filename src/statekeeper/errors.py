"""The exception hierarchy: every error statekeeper raises is a :class:`StatekeeperError`.

Catch ``StatekeeperError`` to handle anything the library raises on purpose; catch a
subclass to handle one failure. Each error carries the context a caller needs to act
(the agent, the sequence number, the current head) as attributes, not only in its text.

Over 600 lines because it is one thing: the hierarchy every layer imports (the bottom
layer of ARCHITECTURE.md), one class per failure a user can catch, each with its own
fields and message. Split, the tree a user reads top to bottom would be scattered, and
``statekeeper.errors`` is the public import path of every one of them.
"""

from __future__ import annotations

import shlex
from typing import Any

__all__ = [
    "AccessDenied",
    "AgentForgotten",
    "AgentLost",
    "AgentNotFound",
    "AgentOnHold",
    "AgentReplaced",
    "AsyncRequired",
    "BackendError",
    "BackendRejected",
    "BackendUnavailable",
    "BackupCorrupt",
    "BackupError",
    "BackupKeyMismatch",
    "CallbackError",
    "CapabilityUnsupported",
    "ClockDriftExceeded",
    "ConfigurationError",
    "ConflictError",
    "CounterOverflow",
    "DecryptionError",
    "DowncastDropsFields",
    "EventVersionTooNew",
    "FeedChanged",
    "FeedCursorMismatch",
    "FeedLost",
    "FeedNotReplicated",
    "FeedPositionCompacted",
    "FeedRewound",
    "FutureStampRefused",
    "HeadMoved",
    "HistoryCompacted",
    "IntegrityError",
    "InvalidAgentId",
    "InvalidArgument",
    "InvalidMachineDefinition",
    "InvalidTransition",
    "JournalBusy",
    "JournalInUse",
    "JournalOfAnotherStore",
    "KeyFileOpenToOthers",
    "KeyNotFound",
    "KeyRequired",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LeasesUnsupported",
    "MachineError",
    "MergeConflict",
    "MigrationError",
    "MissingUpcaster",
    "NamespaceUnsupported",
    "NonNormalAgentId",
    "NotAStore",
    "NotOwned",
    "PatchError",
    "PolicyError",
    "ProgressFileBusy",
    "ProgressOfAnotherRun",
    "ProjectionError",
    "ProjectionFailed",
    "ProjectionNeedsHistory",
    "ProjectionRebuildOutpaced",
    "ReadModelOfAnotherStore",
    "ReadOnlyStore",
    "RestoredPartWay",
    "RetentionPolicyError",
    "RetentionRunning",
    "RetriesExhausted",
    "RewriteBelowPrunedBase",
    "RollbackDetected",
    "SchemaError",
    "SchemaMismatch",
    "SchemaVersionTooNew",
    "SerializationError",
    "StateTooLarge",
    "StatekeeperError",
    "StatekeeperWarning",
    "StepError",
    "StorageError",
    "StoreClosed",
    "StoreLocked",
    "StoreLost",
    "StoreSchemaOutdated",
    "StoredStateInvalid",
    "StreamClaimed",
    "TransitionInProgress",
    "UndeclaredKeysDropped",
    "UnflushedWritesWarning",
    "UnknownEvent",
    "UnknownProjection",
    "UnknownState",
    "UnknownTypeTag",
    "UnreplicatedLeaseTokens",
    "UnsavedChangesWarning",
    "UpcasterFailed",
    "ValidationError",
    "WitnessStoreMismatch",
    "WriteBufferError",
    "WrongFileKind",
]


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
    applies (``statekeeper rekey`` and ``migrate`` do, a bounded number of times)."""

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


class StatekeeperWarning(StatekeeperError, UserWarning):
    """Root of the warnings statekeeper issues (through :mod:`warnings`)."""


class UnsavedChangesWarning(StatekeeperWarning):
    """A store was closed while durable agents it opened still had changes to ``data``
    that were never written (``agent_ids`` lists them). Those changes are lost."""

    def __init__(self, agent_ids: list[str] | str) -> None:
        if isinstance(agent_ids, str):
            # a message already made (``warnings.warn(text, UnsavedChangesWarning)``):
            # kept as it is, not read as a list of one-character agent ids
            self.agent_ids: list[str] = []
            super().__init__(agent_ids)
            return
        self.agent_ids = list(agent_ids)
        shown = ", ".join(repr(a[:60]) for a in agent_ids[:5])
        more = f" and {len(agent_ids) - 5} more" if len(agent_ids) > 5 else ""
        super().__init__(
            f"store closed with unsaved changes to the data of agent(s) {shown}{more}: "
            "they were not written (call agent.save(), or agent.refresh() to drop them)"
        )


class KeyFileOpenToOthers(StatekeeperWarning):
    """A key file (``path``) that users other than its owner may read or write: its
    mode (``mode``, e.g. ``0o644``) gives group or others access. The keys were loaded
    and used all the same; run ``chmod 600 path`` (the message says it; it never shows
    a key). Files statekeeper writes (``keys generate``) are mode 0600."""

    def __init__(self, path: str, mode: int = 0o644) -> None:
        self.path = path
        self.mode = mode
        super().__init__(
            f"key file {path} is open to other users (mode {mode & 0o777:04o}): "
            f"anyone in its group or on this machine may read the keys; "
            f"run 'chmod 600 {shlex.quote(path)}'"
        )


class UnreplicatedLeaseTokens(StatekeeperWarning):
    """Leases are granted on a Redis master that has replicas (``replicas``, read from
    ``INFO replication``) by a store that does not wait for them (no ``wait_replicas``):
    a failover that promotes a replica which missed a grant loses it, and the next grant
    hands its fencing token out again — two holders with one token, and a system outside
    the store that refuses tokens at or below the last one it saw accepts both. Redis
    offers nothing a grant could read that a promotion raises, so only
    ``?wait_replicas=1`` keeps tokens unique (docs/scale.md "Durability and failover").
    Issued once per backend, at its first grant; ``location`` is the masked URL."""

    def __init__(self, location: str, replicas: int = 1) -> None:
        self.location = location
        self.replicas = replicas
        super().__init__(
            f"leases on Redis at {location}, a master with {replicas} replica(s), without "
            "wait_replicas: a failover that loses a grant hands its fencing token out "
            "again (add ?wait_replicas=1 to the URL to keep tokens unique)"
        )


class UnflushedWritesWarning(StatekeeperWarning):
    """A store with ``durability="async"`` was garbage-collected (or its event loop
    closed under it) while writes it had acknowledged were still in its write-behind
    buffer: ``events`` events of ``agents`` agents were never stored and are lost.
    Flush or close the store (a LangGraph saver: ``aclose``) before its loop ends."""

    def __init__(self, agents: int | str, events: int = 0) -> None:
        if isinstance(agents, str):  # a message already made
            self.agents, self.events = 0, events
            super().__init__(agents)
            return
        self.agents, self.events = agents, events
        super().__init__(
            f"a store with durability='async' was dropped with {events} buffered event(s) "
            f"of {agents} agent(s) never written: they are lost (await store.flush() or "
            "store.close() before its event loop ends)"
        )


class UndeclaredKeysDropped(StatekeeperWarning):
    """A typed write could not carry the undeclared keys of some stored items of a
    list (``paths``) of agent ``agent_id`` (model ``model``): the write changed items
    there *and* inserted or removed others, so which new item is which stored one is
    not known (see :mod:`statekeeper.schema.carry`). The write went through; those
    items' undeclared keys (never shown: they may be secrets) are not in it. Write the
    edits and the inserts/removals in two saves to keep them."""

    def __init__(
        self, agent_id: str | None, model: str = "", paths: list[str] | None = None
    ) -> None:
        self.agent_id = agent_id
        self.model = model
        self.paths = list(paths or [])
        shown = ", ".join(self.paths[:5]) + (" ..." if len(self.paths) > 5 else "")
        who = f"agent {agent_id!r}" if agent_id else "a typed write"
        super().__init__(
            f"{who}: keys that model {model} does not declare were dropped from stored"
            f" items of {shown}: the write edited items there and also inserted, removed or"
            " moved others, so they could not be matched (save the edits and the other"
            " changes separately to keep them)"
        )


class BackendUnavailable(StatekeeperError):
    """The requested storage backend is not available (not installed, or not built yet),
    or its server cannot be reached at all when it is first used (refused, unresolvable
    host, missing database, bad login, no answer within the connect timeout). The message
    gives the server's or driver's own reason; nothing was written."""


class StoreClosed(StatekeeperError):
    """An operation was attempted on a store or backend that has been closed."""


# --- state machine -------------------------------------------------------------------


class MachineError(StatekeeperError):
    """Base class for state-machine errors."""


class InvalidTransition(MachineError):
    """An event cannot fire from the current state (strict mode), or a guard refused it."""

    def __init__(self, state: Any, event: Any, reason: str = "no rule") -> None:
        self.state = state
        self.event = event
        self.reason = reason
        super().__init__(f"cannot fire {_label(event)!r} from state {_label(state)!r}: {reason}")


class UnknownState(MachineError, ValueError):
    """A state value does not belong to the machine (e.g. when restoring a stored state).

    ``state`` is the value; ``agent_id`` the agent stored in it (None: no agent's, a
    bare machine's)."""

    def __init__(self, message: str, state: Any = None, agent_id: str | None = None) -> None:
        self.state = state
        self.agent_id = agent_id
        super().__init__(message)

    def for_agent(self, agent_id: str, how: str) -> UnknownState:
        """This error, met for agent ``agent_id`` (``how`` it met the state), naming it."""
        return UnknownState(f"agent {agent_id!r} {how}: {self}", self.state, agent_id)


class InvalidMachineDefinition(MachineError, ValueError):
    """A rule or machine definition is malformed (duplicate rule, unknown state...)."""


class CallbackError(MachineError):
    """An action or hook failed while a transition was being applied.

    ``errors`` lists every exception collected, in order; the first one is the cause.
    """

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        self.errors = errors
        super().__init__(message)


class UnknownEvent(MachineError, ValueError):
    """An event value does not belong to the machine (e.g. when resolving a stored event);
    ``event`` is the value."""

    def __init__(self, message: str, event: Any = None) -> None:
        self.event = event
        super().__init__(message)


class AsyncRequired(MachineError, TypeError):
    """A synchronous call (``fire``, ``can_transition``) met an async guard, action or hook.

    Nothing was changed when this is raised before the state changed; use the async API
    (``await machine.transition(...)``) for machines with async callables.
    """

    def __init__(self, state: Any, event: Any, callable_name: str) -> None:
        self.state = state
        self.event = event
        self.callable_name = callable_name
        super().__init__(
            f"cannot fire {_label(event)!r} from state {_label(state)!r} synchronously: "
            f"{callable_name} is async; use 'await machine.transition(...)'"
        )


class TransitionInProgress(MachineError):
    """A transition was started on a machine that is already in the middle of one.

    Raised for re-entrant calls from a guard, exit hook or action of the same machine
    (``on_enter`` hooks and callbacks run after the state changed and may fire new
    events freely), for a synchronous ``fire``/``restore`` while an async transition of
    the same machine is suspended in one of those steps. Concurrent asyncio tasks do not
    get this error: ``await machine.transition(...)`` waits for its turn.
    """

    def __init__(self, state: Any, event: Any = None) -> None:
        self.state = state
        self.event = event
        what = "restore" if event is None else f"fire {_label(event)!r}"
        super().__init__(
            f"cannot {what}: a transition from state {_label(state)!r} "
            "is still running its guards, exit hooks or action"
        )


# --- storage -------------------------------------------------------------------------


class StorageError(StatekeeperError):
    """Base class for errors about stored data."""


class AgentNotFound(StorageError, KeyError):
    """No stream exists for the agent."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(agent_id)

    def __str__(self) -> str:
        return f"agent {self.agent_id!r} not found"


class BackendError(StorageError):
    """The storage engine failed (I/O error, locked past the timeout, lost connection).

    Whether the operation took effect is unknown only when ``maybe_applied`` is True;
    otherwise nothing was written.
    """

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        self.maybe_applied = maybe_applied
        super().__init__(message)


class BackendRejected(BackendError):
    """The server refused an operation for a reason a retry cannot fix (a
    ``statement_timeout``, a size limit, a permission, a constraint). Raised at once,
    never after the lost-connection retry budget; nothing was written
    (``maybe_applied`` is False) — except when the refusal came part-way through a
    write that is not undone (a Redis script refused at one of its commands keeps what
    it wrote before): then ``maybe_applied`` is True. ``sqlstate`` is the server's
    error code when it sent one (PostgreSQL), else None.
    """

    def __init__(
        self, message: str, *, sqlstate: str | None = None, maybe_applied: bool = False
    ) -> None:
        self.sqlstate = sqlstate
        super().__init__(message, maybe_applied=maybe_applied)


class ConflictError(StorageError):
    """An append expected a different head: someone else wrote first.

    ``expected_seq`` is what the caller believed; ``current_seq`` is the stored head.
    Nothing was written by the failed append.
    """

    def __init__(self, agent_id: str, expected_seq: int, current_seq: int) -> None:
        self.agent_id = agent_id
        self.expected_seq = expected_seq
        self.current_seq = current_seq
        if expected_seq == current_seq and expected_seq > 0:
            # the same seq, another head record: rewritten in place since it was read
            super().__init__(
                f"agent {agent_id!r}: its head record (seq {expected_seq}) was rewritten "
                "since this process read it (by `statekeeper migrate`, its rollback or "
                "finalize, or `statekeeper rekey`; or the agent was deleted and "
                "re-created): nothing was written; reload the agent (agent.refresh(), "
                "store.load) and write again"
            )
            return
        super().__init__(
            f"agent {agent_id!r}: expected head seq {expected_seq}, stored head is {current_seq}"
        )


class HeadMoved(ConflictError):
    """A delete named the head it may delete (``statekeeper delete AGENT --at
    SEQ:MARK``: the head event's seq and :func:`identity mark
    <statekeeper.store.delete_shown.identity_mark>`, what a failed ``statekeeper
    import`` suggests as its undo) and the agent's head is another record now: written
    since (``current_seq`` its head now), or deleted and made again by another process
    up to the same seq, or its head record rewritten in place by a migration or a rekey
    (``remade``). Nothing was deleted: that stream is not the one
    named, and its writes were acknowledged to whoever made them."""

    def __init__(self, agent_id: str, seq: int, mark: str, current_seq: int, remade: bool) -> None:
        super().__init__(agent_id, seq, current_seq)
        self.mark = mark
        self.remade = remade
        now = (
            f"deleted and made again since, up to the same seq (another stream, head seq"
            f" {current_seq}), or its records rewritten in place (a migration, a rekey)"
            if remade
            else f"written since (head seq {current_seq})"
            if current_seq > seq
            # (a head never goes back: a stream below the seq named is another one)
            else f"deleted and made again since (another stream, head seq {current_seq})"
        )
        StatekeeperError.__init__(
            self,
            f"agent {agent_id!r}: not deleted — its head is no longer the one named (seq"
            f" {seq}, {mark}): {now}; check what it holds before deleting it",
        )


#: the streams statekeeper keeps for itself (``"\x01sk-KIND/..."``: see
#: :data:`statekeeper.arguments.INTERNAL_PREFIX`), as a message names them: a user never
#: sees their stored ids
_INTERNAL_PREFIX = "\x01sk-"
_INTERNAL_WORDS = {"audit": "the store's audit log", "holds": "the store's legal holds"}


def _stream_words(agent_id: str) -> str:
    """``agent 'acme/alice'``, or one of the store's own streams in words."""
    if not agent_id.startswith(_INTERNAL_PREFIX):
        return f"agent {agent_id!r}"
    kind, _, rest = agent_id[len(_INTERNAL_PREFIX) :].partition("/")
    if kind in _INTERNAL_WORDS:
        return _INTERNAL_WORDS[kind]
    if kind == "cold" and rest:
        return f"the cold-tier marker of agent {rest!r}"
    if kind == "cend" and rest:
        return f"the announced end of a rehydration of agent {rest!r}"
    return f"a stream statekeeper keeps for itself ({kind})"


class StreamClaimed(ConflictError):
    """A write met a rewrite's claim on the stream (S3: a rekey, a migration or a
    redaction holds the next commit's slot while it runs); nothing was changed.
    ``claim_age``: the claim's age in seconds (its maker's date, this process's clock;
    ``inf`` undated); ``timeout``: ``rewrite_claim_timeout``, past which an append
    breaks it as a dead process's. Retried like any ``ConflictError``."""

    def __init__(
        self, agent_id: str, expected_seq: int, current_seq: int, claim_age: float, timeout: float
    ) -> None:
        super().__init__(agent_id, expected_seq, current_seq)
        self.claim_age, self.timeout = claim_age, timeout
        made = (
            "undated"
            if claim_age == float("inf")
            else f"made {claim_age:.0f} s ago"
            if claim_age >= 0
            else f"dated {-claim_age:.0f} s ahead of this process's clock"
        )
        left = f"in {timeout - claim_age:.0f} s" if claim_age <= timeout else "now"
        self.args = (
            f"{_stream_words(agent_id)}: nothing changed — its stream is claimed by a rewrite"
            f" in progress (statekeeper rekey, migrate, a redaction; the claim {made}): it"
            " goes when the rewrite ends, and an append breaks it once older than"
            f" rewrite_claim_timeout ({timeout:g} s: {left}). Write again once it is gone;"
            " one there until then is a stuck rewrite (run it again to finish it)",
        )


class IntegrityError(StorageError):
    """A stored record failed verification (checksum mismatch, gap, unreadable bytes)."""

    def __init__(self, agent_id: str, seq: int | None, reason: str) -> None:
        self.agent_id = agent_id
        self.seq = seq
        self.reason = reason
        where = _stream_words(agent_id)
        if seq is not None:
            where += f" seq {seq}" if where.startswith("agent ") else f", record {seq}"
        super().__init__(self._message(where, reason))

    @staticmethod
    def _message(where: str, reason: str) -> str:
        return f"integrity check failed for {where}: {reason}"


class DecryptionError(IntegrityError):
    """A stored record cannot be decrypted with the keys given: the key it names is not
    in the keyring (:class:`KeyNotFound`), or is other material under the same id.

    ``key_id`` is the key the record says it was encrypted with. A record altered
    after it was written raises :class:`IntegrityError` itself. The message says it is
    the key (a wrong key file or keyring), not damage, and names the record.
    """

    def __init__(self, agent_id: str, seq: int | None, key_id: str, reason: str) -> None:
        self.key_id = key_id
        super().__init__(agent_id, seq, reason)

    @staticmethod
    def _message(where: str, reason: str) -> str:
        return f"the key does not open this store: wrong key file or keyring? ({where}: {reason})"


class KeyNotFound(DecryptionError):
    """A stored record (or stream head) names a key the keyring does not hold.

    ``no_keyring``: no keyring was given at all (an encrypted store opened without a
    key); the message then says so, and how to give one, rather than blame the key.
    """

    def __init__(
        self, agent_id: str, seq: int | None, key_id: str, *, no_keyring: bool = False
    ) -> None:
        self.no_keyring = no_keyring
        super().__init__(
            agent_id, seq, key_id, f"encrypted with key {key_id!r}, which is not in the keyring"
        )

    def _message(self, where: str, reason: str) -> str:  # type: ignore[override]
        if not self.no_keyring:
            return super()._message(where, reason)
        return (
            "this store is encrypted and no key was given: pass --key-file FILE or set"
            " $STATEKEEPER_KEY_FILE (keyring= in Python)"
            f" ({where}: {reason})"
        )


class StateTooLarge(StorageError):
    """A record or an agent's state exceeds a configured size limit, or the storage
    engine's own limit on one stored value. Nothing was written.

    ``what`` is ``"event"``, ``"snapshot"`` or ``"state"``; ``size`` and ``limit`` are
    in bytes (of the serialized, uncompressed document). A record the engine refused as
    too large (``what``: ``"record"``; its size as stored: encoded, compressed,
    encrypted) names the engine's limit in ``engine`` (``"Redis proto-max-bulk-len"``,
    ``"SQLite SQLITE_LIMIT_LENGTH"``); ``size`` is 0 where the engine did not say.
    """

    def __init__(
        self, agent_id: str, what: str, size: int, limit: int, *, engine: str | None = None
    ) -> None:
        self.agent_id = agent_id
        self.what = what
        self.size = size
        self.limit = limit
        self.engine = engine
        whose = f"{engine} limit" if engine is not None else "limit"
        agent = f"agent {agent_id!r}" if agent_id != "*" else "a write"
        size_text = f"is {size:,} bytes, over" if size else "is over"
        super().__init__(f"{agent}: {what} {size_text} the {whose} of {limit:,} bytes")


class SerializationError(StorageError, TypeError):
    """A value cannot be encoded (or stored bytes cannot be decoded). Nothing was written."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message if path is None else f"{message} (at {path})")


class UnknownTypeTag(SerializationError):
    """Stored data names a type that is not registered with the codec.

    Loading never imports or calls a type named in stored data: only types registered
    on the codec's :class:`~statekeeper.codec.TypeRegistry` are rebuilt. ``tag`` is the
    type name found.
    """

    def __init__(self, tag: str, path: str | None = None) -> None:
        self.tag = tag
        super().__init__(
            f"stored data names type {tag!r}, which is not registered with the codec", path
        )


class PatchError(StorageError, ValueError):
    """A JSON Patch operation cannot be applied to the document."""


class WriteBufferError(StorageError):
    """Write-behind (``async`` durability) could not flush some buffered records.

    ``failures`` maps agent id to the exception that stopped its buffered records.
    """

    def __init__(self, failures: dict[str, BaseException]) -> None:
        self.failures = failures
        names = ", ".join(sorted(failures))
        super().__init__(f"buffered writes could not be flushed for: {names}")


# --- concurrency ---------------------------------------------------------------------


class RetriesExhausted(ConflictError):
    """A read-modify-write helper gave up after ``attempts`` conflicting attempts.

    It is a :class:`ConflictError` (the caller's change was not written), and
    ``last`` is the conflict of the final attempt.
    """

    def __init__(self, agent_id: str, attempts: int, last: ConflictError) -> None:
        self.attempts = attempts
        self.last = last
        super().__init__(agent_id, last.expected_seq, last.current_seq)
        self.args = (
            f"agent {agent_id!r}: gave up after {attempts} conflicting attempts "
            f"(last: expected head seq {last.expected_seq}, stored head is {last.current_seq})",
        )


class AgentReplaced(ConflictError):
    """The agent a write was based on is gone: deleted (and perhaps created again under
    the same id) since the state the caller started from was read. Writing anyway would
    overwrite another incarnation of the id, so nothing was written, and retrying the
    same write cannot help (read-modify-write helpers do not retry it).

    ``created_at`` is the creation time of the incarnation the caller's state came from
    (its identity), ``found`` that of the stored stream (None: no stream now).
    """

    def __init__(
        self,
        agent_id: str,
        expected_seq: int,
        current_seq: int,
        created_at: float,
        found: float | None,
    ) -> None:
        super().__init__(agent_id, expected_seq, current_seq)
        self.created_at = created_at
        self.found = found
        now = "it has no stream now" if found is None else f"the stored one was created at {found}"
        self.args = (
            f"agent {agent_id!r} was deleted and created again since seq {expected_seq} was "
            f"read: that state belongs to the incarnation created at {created_at}, {now}; "
            "nothing was written",
        )


class CapabilityUnsupported(StatekeeperError):
    """The backend does not offer an optional capability (see
    :class:`statekeeper.backends.base.Capability`); nothing was done.

    Engines declare what they offer in ``Backend.capabilities``; a call of an
    undeclared one raises this (leases raise :class:`LeasesUnsupported`).
    """

    def __init__(self, backend: str, capability: str, detail: str = "") -> None:
        self.backend = backend
        self.capability = capability
        suffix = f": {detail}" if detail else ""
        super().__init__(f"the {backend} backend does not support {capability}{suffix}")


class LeaseError(StatekeeperError):
    """Base class for lease and fencing errors."""


class LeaseHeld(LeaseError):
    """The agent's lease is held by another holder and has not expired.

    ``holder`` and ``expires_at`` (seconds since the epoch, on the backend's clock)
    describe the current lease.
    """

    def __init__(self, agent_id: str, holder: str, expires_at: float) -> None:
        self.agent_id = agent_id
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(f"agent {agent_id!r} is leased by {holder!r}")


class LeaseLost(LeaseError):
    """A write (or renewal) carried a fencing token that is no longer the agent's newest.

    The lease expired and was taken by someone else, or was released: nothing was
    written. ``token`` is the caller's; ``current_token`` and ``current_holder`` are
    the newest lease the backend knows (0 and None when it has none).
    """

    def __init__(
        self,
        agent_id: str,
        holder: str,
        token: int,
        current_token: int,
        current_holder: str | None,
    ) -> None:
        self.agent_id = agent_id
        self.holder = holder
        self.token = token
        self.current_token = current_token
        self.current_holder = current_holder
        lease = f"agent {agent_id!r}: lease token {token} of {holder!r}"
        if current_holder is not None:
            why = f"is stale (newest is {current_token}, held by {current_holder!r})"
        elif current_token == token:
            why = "was released (acquire a new lease to write)"
        elif current_token > token:
            why = f"is stale (newest is {current_token}, since released)"
        else:
            why = "is not current (the agent holds no lease)"
        super().__init__(f"{lease} {why}; nothing was written")


class LeasesUnsupported(LeaseError):
    """The backend cannot grant leases or check fencing tokens (e.g. the S3 archive tier).

    A write that carries a fencing token is refused with this error rather than
    stored unchecked.
    """

    def __init__(self, backend: str) -> None:
        self.backend = backend
        super().__init__(f"the {backend} backend does not support leases or fenced writes")


class RetentionRunning(LeaseHeld):
    """Another retention run (``statekeeper retention apply``,
    :func:`~statekeeper.governance.retention.apply_retention`) holds the store's run
    lock: two runs at once would work the same agents. Nothing was read or changed.

    ``namespace`` is the scope of the run holding it (``""``: the whole store),
    ``holder`` who it is (pid, host, principal), ``expires_at`` when its lease expires
    unless renewed (seconds since the epoch, on the engine's clock): a run whose process
    died holds it no longer than that, and the next run resumes its work.
    """

    def __init__(self, namespace: str, holder: str, expires_at: float) -> None:
        self.namespace = namespace
        self.agent_id = ""
        self.holder = holder
        self.expires_at = expires_at
        StatekeeperError.__init__(self, namespace, holder, expires_at)

    def __str__(self) -> str:
        import time

        where = f"namespace {self.namespace!r}" if self.namespace else "the store"
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.expires_at))
        return (
            f"another retention run holds the run lock of {where} ({self.holder}), its"
            f" lease running until {until} unless renewed: wait for it to end (a run whose"
            " process died holds it no longer than that; run again then to resume it)"
        )


class MergeConflict(StatekeeperError):
    """Two concurrent versions of an agent that no merge strategy could reconcile.

    Nothing is dropped: ``ours`` and ``theirs`` are both versions (and ``base`` their
    common ancestor when known); ``fields`` names the paths that stayed unresolved;
    ``reason``, when known, why (it ends the message).
    """

    def __init__(
        self,
        agent_id: str | None,
        ours: Any,
        theirs: Any,
        base: Any = None,
        fields: tuple[str, ...] = (),
        reason: str = "",
    ) -> None:
        self.agent_id = agent_id
        self.ours = ours
        self.theirs = theirs
        self.base = base
        self.fields = fields
        where = f"agent {agent_id!r}" if agent_id is not None else "document"
        what = f" at {', '.join(fields)}" if fields else ""
        self.reason = reason
        why = f": {reason}" if reason else ""
        super().__init__(f"{where}: concurrent updates{what} could not be merged{why}")


class ReadOnlyStore(ConfigurationError):
    """A write was attempted through a backend opened read-only. Nothing was written."""


class NotOwned(ConfigurationError):
    """A file would be deleted or overwritten, but statekeeper cannot prove it created
    it (no ownership marker). The file was left untouched."""


class WrongFileKind(ConfigurationError):
    """A file given to a command is not the kind it reads: a folder, a device, an empty
    file, a SQLite database or a backup given to ``import``, an export given to
    ``restore``... (only its first bytes were read). Nothing was written. ``path``
    names it, ``reason`` what it is instead."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class StepError(StatekeeperError):
    """A durable step cannot run as asked (e.g. its recorded result is unreadable,
    or a step id is reused in one run for a different step)."""


# --- store identity, rollback and the SQLite write lock -------------------------------


class ProgressOfAnotherRun(ConfigurationError):
    """A progress file was given to resume a run it was not written for: it records a
    run on another store, or work this store does not have (a store replaced by a copy
    or a restore since). Resuming would skip this store's items up to the file's resume
    point as if done. Nothing was done.

    ``progress_file`` is the file; ``recorded`` says what it records and ``found``
    what this run is on (stores as URLs without passwords, a SQLite file by its
    absolute path). Delete the file to start over (a rerun skips what is done)."""

    def __init__(self, progress_file: str, recorded: str, found: str) -> None:
        self.progress_file = progress_file
        self.recorded = recorded
        self.found = found
        super().__init__(progress_file, recorded, found)

    def __str__(self) -> str:
        return (
            f"{self.progress_file} records a run on {self.recorded}, not on {self.found}:"
            " resuming from it would skip agents as if done; give this run its own"
            " progress file, or delete this one to start over"
        )


class ProgressFileBusy(ConfigurationError):
    """Another run is using this progress file right now (``statekeeper retention
    apply --progress-file``): two runs sharing one would write their resume points over
    each other's. Nothing was done.

    ``progress_file`` is the file, ``holder`` says who holds it (pid, host, since when).
    Give each run its own progress file, or wait for that run to end (one whose process
    died holds nothing)."""

    def __init__(self, progress_file: str, holder: str) -> None:
        self.progress_file = progress_file
        self.holder = holder
        super().__init__(progress_file, holder)

    def __str__(self) -> str:
        return (
            f"{self.progress_file} is in use by a running retention run ({self.holder}):"
            " wait for it to end, or give this run its own progress file"
        )


class NamespaceUnsupported(ConfigurationError):
    """A tool that works on the whole store was asked to work in a namespace (CLI
    ``--namespace``, ``StateStore(..., namespace=...)``). ``operation`` names it and
    ``reason`` says why it cannot be limited to one namespace. Nothing was done."""

    def __init__(self, operation: str, namespace: str, reason: str) -> None:
        self.operation = operation
        self.namespace = namespace
        self.reason = reason
        super().__init__(f"{operation} cannot run in namespace {namespace!r}: {reason}")


class KeyRequired(ConfigurationError):
    """A store opened without a key (no ``keyring``, no ``--key-file`` /
    ``$STATEKEEPER_KEY_FILE``) was asked to write into a store that holds encrypted
    records: the write would have stored its record in the clear. Nothing was written.
    Open the store with its keyring."""

    def __init__(self, location: str) -> None:
        self.location = location
        super().__init__(
            f"{location} holds encrypted records but was opened without a key: open it"
            " with its keyring (StateStore(..., keyring=...), or --key-file /"
            " $STATEKEEPER_KEY_FILE on the command line); nothing was written"
        )


class NotAStore(ConfigurationError):
    """The location exists but does not hold a statekeeper store (an empty file, a
    file that is not a database, or another application's database). Nothing was
    written to it. ``location`` names it."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"{location} is not a statekeeper store: {reason}")


class StoreSchemaOutdated(ConfigurationError):
    """The store's layout is of an older statekeeper (``stored``, below ``supported``,
    this one's) and a read-only opening does not upgrade it: ``statekeeper init URL``
    does (then processes of the older version refuse it). ``location`` names it."""

    def __init__(self, location: str, stored: int, supported: int) -> None:
        self.location = location
        self.stored = stored
        self.supported = supported
        super().__init__(
            f"{location} is at schema version {stored}; this statekeeper reads "
            f"{supported}: upgrade it with `statekeeper init URL` (processes of the "
            "version before refuse it once upgraded)"
        )


class RollbackDetected(IntegrityError):
    """The store went back in time: it no longer holds a write that was acknowledged.

    Found by the store's witness (see :mod:`statekeeper.security.highwater`). ``seq``
    is the last seq of the agent known to have been acknowledged, ``found`` the head
    the store holds now (0: the agent is gone), ``witness`` the witness file.
    """

    def __init__(self, agent_id: str, seq: int, found: int, witness: str, detail: str) -> None:
        self.found = found
        self.witness = witness
        super().__init__(agent_id, seq, f"rollback detected: {detail} (witness {witness})")


class WitnessStoreMismatch(IntegrityError):
    """The store's witness file (``witness``) was written for another store: its
    recorded store identity (``expected``, in words: name and store id) is not this
    store's (``found``). Another store's witness was given (``witness=PATH`` reused),
    or this store was created again (its data lost) or replaced. None of the file's
    marks is trusted: move the file away to accept the store as it is now (see
    :mod:`statekeeper.security.witness_store`)."""

    def __init__(self, witness: str, expected: str, found: str) -> None:
        self.witness = witness
        self.expected = expected
        self.found = found
        super().__init__(
            "*",
            None,
            f"the witness file {witness} was written for {expected}, and this store is "
            f"{found}: another store's witness, or this store was created again (its data "
            "lost) or replaced; move the witness file away to accept the store as it is now",
        )


class StoreLocked(BackendError):
    """Another connection holds the store's write lock and does not let go (SQLite).

    Raised instead of waiting out the whole busy timeout when the holder makes no
    progress for ``stall_timeout`` seconds (a frozen or stuck process inside a write
    transaction), or when the lock stays busy past ``busy_timeout``. Nothing was
    written. ``waited`` is how long this call waited, in seconds.
    """

    def __init__(self, path: str, waited: float, reason: str) -> None:
        self.path = path
        self.waited = waited
        super().__init__(f"{path}: write lock not obtained after {waited:.1f} s: {reason}")


class StoreLost(StorageError):
    """The store lost data behind this process's back: on Redis, the server was flushed
    (``FLUSHALL`` / ``FLUSHDB``), the store's keys were deleted or evicted, or the
    server restarted without persistence. Found by the store's identity marker (see
    ``docs/backends.md``, Redis), on the first operation after the loss. On SQLite,
    the store's file was deleted, renamed or replaced by another file while this
    process had it open (found by the next write: SQLite would go on writing to the
    file it opened, no longer at the path).

    Nothing was written by the operation that raised it, and every later operation of
    the same backend raises it too: the states this process cached, the heads it
    expects and the feed positions it holds belong to data that is gone (a save would
    have started the agent over at seq 1). Open the store again to go on with what it
    holds now; nothing of the lost data comes back. ``location`` names the store (its
    masked URL and key prefix), ``shard`` the shard that lost its data on a sharded
    store (None: a single-shard store), ``reason`` what was found.
    """

    def __init__(self, location: str, reason: str, *, shard: int | None = None) -> None:
        self.location = location
        self.reason = reason
        self.shard = shard
        where = location if shard is None else f"{location} (shard {shard})"
        super().__init__(
            f"{where} lost its data: {reason}; the states, heads and feed positions this "
            "process holds belong to data that is gone, so nothing more is read or "
            "written through it: open the store again to go on with what it holds now"
        )


class AgentLost(StoreLost):
    """One agent's stored data is gone while the rest of the store stays: on Redis, the
    agent's keys were evicted (a ``maxmemory`` with an ``allkeys-*`` policy), deleted
    (``DEL``) or expired (an ``EXPIRE`` set outside the store's ``ttl``), while the
    store's agent index still lists it. Found on a save, load, history read or listing
    of that agent (see ``docs/backends.md``, Redis).

    Nothing was written by the operation that raised it; other agents are not
    affected. Without this error the agent would have started over at seq 1 (or been
    answered "not found", or left out of the listings). The loss stays loud until it is
    acknowledged: deleting the agent (``store.delete``, ``statekeeper delete``) takes it
    off the index, after which its id can be used again (a restore from a backup brings
    its history back then). ``agent_id`` names the agent, ``location`` the store,
    ``reason`` what was found (with the likely cause when the server evicts).
    """

    def __init__(self, location: str, agent_id: str, reason: str) -> None:
        self.location = location
        self.agent_id = agent_id
        self.reason = reason
        self.shard = None
        StorageError.__init__(
            self,
            f"agent {agent_id!r} of {location} lost its stored data: {reason}; nothing "
            "was written (its next save would have started it over at seq 1): delete "
            "the agent to acknowledge the loss, then save it afresh or restore it from a "
            "backup",
        )


# --- governance: principals, policies, the audit log (statekeeper.governance) ----------


class AccessDenied(StatekeeperError, PermissionError):
    """The store's principal may not do this (see ``docs/governance.md``).

    ``principal`` is who asked, ``permission`` what was needed (``"read"``,
    ``"write"`` or ``"admin"``), ``operation`` the call (``"save"``, ``"load"``...)
    and ``agent_id`` the agent it was for (None for store-wide operations);
    ``namespace`` the namespace of an operation on a whole namespace (a backup, a
    restore, a retention run or a listing through a store opened in it; ``""``: the
    whole store). Nothing was read or written; the refusal is in the audit log when
    the store keeps one.
    """

    def __init__(
        self,
        principal: str,
        permission: str,
        operation: str,
        agent_id: str | None = None,
        reason: str | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        self.principal = principal
        self.permission = permission
        self.operation = operation
        self.agent_id = agent_id
        self.namespace = namespace
        on = f" on agent {agent_id!r}" if agent_id is not None else ""
        if agent_id is None and namespace:
            on = f" in namespace {namespace!r}"
        why = reason or f"needs {permission} permission"
        super().__init__(f"access denied: principal {principal!r} may not {operation}{on} ({why})")


class PolicyError(ConfigurationError):
    """A policy (file or object) cannot be used. ``source`` names the file (or
    ``"<policy>"``) and ``line`` the line of the problem when it is known."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}, line {line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


def _label(value: Any) -> str:
    return str(getattr(value, "value", value))


# --- schema evolution (statekeeper.schema) ---------------------------------------------


def _fields(errors: list[tuple[str, str]], limit: int = 5) -> str:
    """``field: problem; field: problem`` (values never shown: they may be secrets)."""
    shown = "; ".join(f"{path or '(root)'}: {message}" for path, message in errors[:limit])
    more = f"; and {len(errors) - limit} more" if len(errors) > limit else ""
    return shown + more


class SchemaError(StatekeeperError):
    """Base class for errors about state models, schema versions and migrations."""


class ValidationError(SchemaError, InvalidArgument):
    """A typed agent's state does not match its model: nothing was written.

    ``model`` names the model, ``errors`` lists ``(field path, problem)`` pairs
    (``"messages[3].role"``, ``"Input should be 'user' or 'assistant'"``); the offending
    values are never part of the message. ``argument`` is ``"state.<first field>"``.
    """

    def __init__(self, model: str, errors: list[tuple[str, str]], agent_id: str | None = None):
        self.model = model
        self.errors = errors
        self.agent_id = agent_id
        self.fields = [path for path, _ in errors]
        where = f"agent {agent_id!r}: " if agent_id is not None else ""
        first = errors[0][0] if errors else ""
        super().__init__(
            f"state.{first}" if first else "state",
            f"{where}state does not match {model}: {_fields(errors)}; nothing was written",
        )


class StoredStateInvalid(SchemaError, StorageError):
    """A stored state (after its upcasters ran) does not match the model it is loaded
    as: typically a field was renamed or retyped without an upcaster for the stored
    version. ``version`` is the stored schema version, ``current`` the model's."""

    def __init__(
        self,
        agent_id: str,
        seq: int | None,
        model: str,
        version: int,
        current: int,
        errors: list[tuple[str, str]],
    ) -> None:
        self.agent_id = agent_id
        self.seq = seq
        self.model = model
        self.version = version
        self.current = current
        self.errors = errors
        self.fields = [path for path, _ in errors]
        at = f" seq {seq}" if seq is not None else ""
        hint = (
            f" (upcast from version {version} to {current} ran)"
            if version != current
            else " (a changed model needs a new version and an upcaster from this one)"
        )
        super().__init__(
            f"agent {agent_id!r}{at}: stored state (schema version {version}) does not load "
            f"as {model} version {current}: {_fields(errors)}{hint}"
        )


class SchemaMismatch(SchemaError, StorageError):
    """Stored data cannot be brought to this code's schema version: no upcaster (or
    downcaster) from ``version``, or it belongs to another model. Nothing is guessed:
    a wrong value is never returned. ``agent_id``/``seq`` say where (None when not
    loading a stored record)."""

    def __init__(self, message: str, *, agent_id: str | None = None, seq: int | None = None):
        self.agent_id = agent_id
        self.seq = seq
        where = ""
        if agent_id is not None:
            where = f"agent {agent_id!r}" + (f" seq {seq}" if seq is not None else "") + ": "
        super().__init__(where + message)


class MissingUpcaster(SchemaMismatch):
    """No upcaster is registered to take ``model`` from ``version`` to the next one."""

    def __init__(
        self,
        model: str,
        version: int,
        target: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.target = target
        super().__init__(
            f"{model} has no upcaster from schema version {version} (stored) towards "
            f"{target} (this code's); register one with @schema.upcaster(from_version="
            f"{version})",
            agent_id=agent_id,
            seq=seq,
        )


class SchemaVersionTooNew(SchemaMismatch):
    """Stored data was written by newer code (schema ``version`` > this code's
    ``current``) and no downcaster takes it back: this reader refuses rather than
    misread it."""

    def __init__(
        self,
        model: str,
        version: int,
        current: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.current = current
        super().__init__(
            f"{model} was stored at schema version {version}, newer than this code's "
            f"{current}, and no downcaster from version {version} is registered "
            "(upgrade this application, or register a downcaster)",
            agent_id=agent_id,
            seq=seq,
        )


class DowncastDropsFields(SchemaMismatch):
    """A write by older code over a state newer code stored (schema ``version`` >
    ``current``) would delete ``fields``: keys the downcasters dropped (the older code
    never saw them) that its model cannot carry (``extra="forbid"`` or ``"allow"`` at
    every depth keeps no key it was not given). Nothing was written: leave those keys
    in the document in the downcaster (a model with ``extra="forbid"`` refuses them:
    use the default ``"ignore"``), or write through the newer code."""

    def __init__(
        self,
        model: str,
        version: int,
        current: int,
        fields: list[str],
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.current = current
        self.fields = list(fields)
        super().__init__(
            f"{model} was stored at schema version {version}; the downcasters to this "
            f"code's {current} dropped {', '.join(map(repr, self.fields))}, which this "
            "model cannot carry: a write by this code would delete them, so nothing was "
            "written (leave them in the document in the downcaster, or write through "
            "the newer code)",
            agent_id=agent_id,
            seq=seq,
        )


class EventVersionTooNew(SchemaVersionTooNew):
    """A custom event (``event_type``) was recorded by newer code (schema ``version`` >
    this code's ``current``): its type and info may have a shape this code does not
    know — a newer version may have renamed it or changed its info — and events have no
    downcasters, so a typed history read refuses it rather than hand it out as if this
    code had recorded it."""

    def __init__(
        self,
        model: str,
        event_type: str,
        version: int,
        current: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.event_type = event_type
        self.version = version
        self.current = current
        SchemaMismatch.__init__(
            self,
            f"the {event_type!r} event of {model} was recorded at schema version {version}, "
            f"newer than this code's {current}: its type and info may be of a shape this "
            "code does not know (upgrade this application to read it)",
            agent_id=agent_id,
            seq=seq,
        )


class UpcasterFailed(SchemaMismatch):
    """An upcaster or downcaster raised, or did not return a document (a dict)."""

    def __init__(
        self,
        model: str,
        version: int,
        target: int,
        reason: str,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.target = target
        super().__init__(
            f"{model}: the caster from schema version {version} to {target} failed: {reason}",
            agent_id=agent_id,
            seq=seq,
        )


class MigrationError(SchemaError):
    """A migration cannot run as asked (finalized already, another run in progress, a
    rollback that would lose writes). Nothing more was written."""


class JournalInUse(MigrationError):
    """A migration to another target was given a journal that still holds an open run:
    one neither finalized nor rolled back. Starting the new run there would replace
    that run's record (its id, where to resume, its rollback), so it is refused.

    ``journal`` is the file, ``run_id``, ``model`` and ``target`` name the run it holds,
    ``state`` says how far it got. Finalize that run, roll it back, or give the new
    run another journal. Nothing was written.
    """

    def __init__(self, journal: str, run_id: str, model: str, target: int, state: str) -> None:
        self.journal = journal
        self.run_id = run_id
        self.model = model
        self.target = target
        self.state = state
        super().__init__(journal, run_id, model, target, state)

    def __str__(self) -> str:
        return (
            f"{self.journal} holds run {self.run_id} of {self.model!r} to version "
            f"{self.target}, {self.state}: finalize it (migrate --finalize, "
            "schema.finalize), roll it back (migrate --rollback, schema.rollback), or give "
            "this migration another journal (--journal FILE, journal=)"
        )


class JournalOfAnotherStore(MigrationError):
    """A migration journal was given with a store it does not belong to: it records
    a run on ``journal_store`` and this run is on ``store``. Resuming there would start
    after an agent of the other store (skipping this store's agents up to it), and a
    rollback or finalize would mark the other store's run. Nothing was written.

    ``journal`` is the file; ``journal_store`` and ``store`` name the two stores (their
    URLs without passwords, a SQLite file by its absolute path). Give this store's run
    its own journal (``--journal FILE``)."""

    def __init__(self, journal: str, journal_store: str, store: str) -> None:
        self.journal = journal
        self.journal_store = journal_store
        self.store = store
        super().__init__(journal, journal_store, store)

    def __str__(self) -> str:
        return (
            f"{self.journal} is the journal of a run on another store ({self.journal_store}),"
            f" not {self.store}: give this store's migration its own journal (--journal "
            "FILE, journal=)"
        )


class JournalBusy(MigrationError):
    """Another run (a migrate, rollback or finalize, in another process or task) is
    using this migration journal right now: two runs on one journal would overwrite
    each other's record. Nothing was written.

    ``journal`` is the file, ``holder`` says who holds it (pid, host, since when).
    Wait for that run to end; one whose process died holds nothing, and the next run
    on the journal resumes it.
    """

    def __init__(self, journal: str, holder: str) -> None:
        self.journal = journal
        self.holder = holder
        super().__init__(journal, holder)

    def __str__(self) -> str:
        return (
            f"{self.journal} is in use by a running migration ({self.holder}): wait for it "
            "to end (a run whose process died holds nothing: run migrate again to resume it)"
        )


class AgentForgotten(StorageError):
    """The agent was crypto-shredded (``statekeeper forget``): its data key is destroyed,
    so none of its records, in any copy of the store, can be decrypted again.

    ``agent_id`` names the agent; ``forgotten_at`` is when its key was destroyed (epoch
    seconds; None when the key vault holds no record of the agent at all, e.g. a store
    restored next to another vault). Raised instead of returning anything decoded.
    """

    def __init__(self, agent_id: str, forgotten_at: float | None = None) -> None:
        self.agent_id = agent_id
        self.forgotten_at = forgotten_at
        super().__init__(agent_id, forgotten_at)

    def __str__(self) -> str:
        if self.forgotten_at is None:
            return (
                f"agent {self.agent_id!r} cannot be read: its data key is not in the key vault"
                " (forgotten, or a vault other than the one that wrote it)"
            )
        return f"agent {self.agent_id!r} was forgotten: its data key was destroyed"


class AgentOnHold(StatekeeperError, PermissionError):
    """A legal hold exempts the agent from every purge (``statekeeper hold``; a
    retention policy's ``hold`` line): ``forget``, ``delete``, retention and expiry
    refuse it. ``agent_id`` names the agent, ``hold`` the hold's pattern (``acme/alice``
    or ``legal/*``), ``reason`` why it was placed and ``operation`` the purge refused.
    Nothing was changed; release the hold first (``statekeeper hold remove``, audited).
    """

    def __init__(self, agent_id: str, hold: str, reason: str, operation: str) -> None:
        self.agent_id = agent_id
        self.hold = hold
        self.reason = reason
        self.operation = operation
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"cannot {operation} agent {agent_id!r}: it is under the legal hold {hold!r}{why};"
            " release the hold first ('statekeeper hold remove')"
        )


class BackupError(StatekeeperError):
    """A backup cannot be written or restored. Nothing was restored."""


class RestoredPartWay(BackupError):
    """``restore(..., skip_existing=True)`` found agents a restore stopped part-way left
    in the target (the backup's stream up to the end of an earlier part of the chain:
    older than the backup). Skipping them as "already held" would leave them older with
    a report of success, so nothing was restored.

    ``agents`` maps each such agent (as the target lists it) to ``(held, head)``: the
    seq the target holds and the backup's head. Delete them first, or restore into a
    fresh target."""

    def __init__(self, agents: dict[str, tuple[int, int]]) -> None:
        self.agents = dict(agents)
        listed = sorted(self.agents)
        first = listed[0] if listed else ""
        held, head = self.agents[first] if listed else (0, 0)
        shown = ", ".join(repr(a) for a in listed[1:4])
        more = len(listed) - 4
        others = (f"; also {shown}" if shown else "") + (f" and {more:,} more" if more > 0 else "")
        super().__init__(
            f"the target store holds {len(listed):,} agent(s) restored part-way ({first!r}"
            f" up to seq {held} of the backup's {head}: a restore stopped there{others}):"
            " skipping would leave them older than the backup; delete them first, or restore"
            " into a fresh target (nothing was restored)"
        )


class BackupCorrupt(BackupError):
    """A backup file is damaged, truncated, edited or incomplete (``what`` names the part:
    ``"header"``, ``"chunk 3"``, ``"manifest"``, ``"agent 'x'"``...). Nothing was restored."""

    def __init__(self, path: str, what: str, reason: str) -> None:
        self.path = path
        self.what = what
        self.reason = reason
        super().__init__(f"backup {path}: {what}: {reason}")


class BackupKeyMismatch(BackupError):
    """The backup key given is not the one the backup was written with (or it is the
    store's own key, which a backup must not use). Nothing was read or restored."""


class RetentionPolicyError(ConfigurationError):
    """A retention policy is malformed; ``line`` is the line of the policy file (None
    when the policy was built in Python)."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}: " if source and line else (f"{source}: " if source else "")
        super().__init__(where + message)


class HistoryCompacted(StorageError):
    """The state asked for lies before the agent's retention base: retention kept the
    last events and compacted the ones up to ``base_seq`` into a snapshot, so seqs
    ``<= base_seq`` (except the base itself) cannot be rebuilt any more."""

    def __init__(self, agent_id: str, base_seq: int) -> None:
        self.agent_id = agent_id
        self.base_seq = base_seq
        super().__init__(
            f"agent {agent_id!r}: history before seq {base_seq + 1} was compacted by"
            f" retention (its base is the snapshot at seq {base_seq})"
        )


class FeedPositionCompacted(StorageError):
    """A change-feed subscriber asked to resume after ``position``, but the feed no
    longer holds the positions up to ``floor`` (they were trimmed: see
    ``StateStore.trim_feed``). Events between the two cannot be delivered in feed
    order any more: rebuild the consumer's state from the agents' current snapshots
    (``statekeeper projections rebuild NAME`` for a projection) and subscribe again
    from ``floor``.
    """

    def __init__(self, position: int, floor: int, *, shard: int | None = None) -> None:
        self.position = position
        self.floor = floor
        #: on a sharded store, the shard whose feed was trimmed (its positions are meant)
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        super().__init__(
            f"change feed position {position}{where} was compacted away (the feed starts "
            f"after position {floor}): rebuild the read model from a snapshot of the "
            f"agents' current state and subscribe again from position {floor}"
        )


class FeedLost(StoreLost):
    """Part of the change feed's stored data is gone while the store's identity marker
    stays (Redis: the feed's counter or stream key evicted by an ``allkeys-*`` policy,
    or deleted). ``what`` says which: ``"counter"`` (the last position handed out, gone
    with the stream that would restore it: new positions would repeat ones subscribers
    already hold) or ``"entries"`` (positions ``after + 1`` .. ``through`` are no longer
    in the stream, though never trimmed: a subscriber would skip their events without
    a word). ``recovery`` says how to go on; ``shard`` names the shard on a sharded
    store. Nothing was written by the operation that raised it (see ``docs/feed.md``).
    """

    def __init__(
        self,
        location: str,
        what: str,
        detail: str,
        recovery: str,
        *,
        after: int = 0,
        through: int = 0,
        shard: int | None = None,
    ) -> None:
        self.location = location
        self.what = what
        self.reason = detail
        self.recovery = recovery
        self.after = after
        self.through = through
        self.shard = shard
        where = location if shard is None else f"{location} (shard {shard})"
        StorageError.__init__(
            self, f"the change feed of {where} lost its {what}: {detail}; {recovery}"
        )


class FeedNotReplicated(BackendError):
    """A change-feed read found entries after ``position`` that the master holds but
    fewer than ``replicas`` replicas confirmed (``acknowledged`` of them) within
    ``timeout`` seconds (Redis opened with ``wait_replicas=N``, ``wait_timeout``).
    They are held back, not a gap: a failover could still lose them, and a subscriber
    handed one could then see its position given to another event. Nothing was
    delivered past ``position``; read again later (a live subscription waits and
    retries by itself; a ``stop_at_head`` catch-up raises this rather than end short).
    """

    def __init__(
        self,
        position: int,
        replicas: int,
        acknowledged: int,
        timeout: float,
        *,
        shard: int | None = None,
    ) -> None:
        self.position = position
        #: how many replicas were asked to confirm (``wait_replicas``)
        self.replicas = replicas
        #: how many did within ``timeout``
        self.acknowledged = acknowledged
        self.timeout = timeout
        #: on a sharded store, the shard whose feed was read (its positions are meant)
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        super().__init__(
            f"change feed entries after position {position}{where} are held back, not"
            f" missing: {acknowledged} of {replicas} replicas confirmed them within"
            f" {timeout:g}s (wait_timeout), and a failover could still lose them; read"
            " again later"
        )


class ProjectionError(StatekeeperError):
    """Base class for projection errors (:mod:`statekeeper.feed`)."""


class UnknownProjection(ProjectionError, ConfigurationError):
    """No projection of that name is registered with the runner; ``known`` lists the
    registered ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no projection named {name!r} (registered: {', '.join(known) or 'none'})")


class ReadModelOfAnotherStore(ProjectionError, ConfigurationError):
    """The default read-model file ``path`` (``x.projections.db`` beside a SQLite store
    ``x.<suffix>``) holds projection ``name`` of another store: both the store it
    follows (a SQLite file by its absolute path) and that store's change feed differ
    from this one's. Two stores beside each other (``x.db`` and ``x.db2``, or
    ``x.sqlite``) share that file: their ``projections status``, ``run`` or ``rebuild``
    reported, refused or emptied the other store's read models. Nothing was changed;
    give each store its own file (``--read-model FILE``)."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        super().__init__(
            f"{path} holds the read models of another store (projection {name!r} follows"
            " another file and another change feed): give this store its own read-model"
            " file (--read-model FILE)"
        )


class ProjectionNeedsHistory(ProjectionError, FeedPositionCompacted):
    """Projection ``name`` cannot be rebuilt: the change feed was trimmed through
    position ``floor`` (of ``shard``, on a sharded store) by retention or
    ``trim_feed``, and the projection is made from events — counts, sums, moves —
    that the agents' current states do not hold (it does not implement
    :meth:`statekeeper.feed.Projection.seed`), so it cannot start from them either.
    Nothing was changed: its read model and position are as they were. The message
    says what can be done instead."""

    def __init__(self, name: str, floor: int, *, shard: int | None = None) -> None:
        self.name = name
        self.position = 0
        self.floor = floor
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        StatekeeperError.__init__(
            self,
            f"projection {name!r} cannot be rebuilt: the change feed was trimmed through "
            f"position {floor}{where} (retention or trim_feed), and {name!r} counts events"
            " that are gone and that the agents' current states do not hold. Instead:"
            f" keep its read model as it is (`statekeeper projections run {name}` goes on"
            " from its position); or rebuild it from the events still in the feed only"
            f" (`statekeeper projections rebuild {name} --since-floor`, "
            f"runner.rebuild({name!r}, since_floor=True): it then counts from position"
            f" {floor} on); or restore a backup taken before the trim into another store"
            " and rebuild it there",
        )


class ProjectionRebuildOutpaced(ProjectionError, FeedPositionCompacted):
    """Projection ``name``'s rebuild started over ``attempts`` times and each time the
    change feed's floor was raised past it before it finished (retention, or
    ``trim_feed``, running beside it: through position ``floor`` of ``shard`` last).
    Its read model is left being rebuilt (the next rebuild starts over); nothing stored
    was changed."""

    def __init__(self, name: str, attempts: int, floor: int, *, shard: int | None = None) -> None:
        self.name = name
        self.attempts = attempts
        self.position = 0
        self.floor = floor
        self.shard = shard
        where = "" if shard is None else f" of shard {shard}"
        StatekeeperError.__init__(
            self,
            f"projection {name!r} could not be rebuilt: {attempts} times the change feed's"
            f" floor was raised past the rebuild before it finished (last through position"
            f" {floor}{where}: retention or trim_feed running beside it, faster than the"
            f" rebuild). Run `statekeeper projections rebuild {name}` again when retention"
            " runs less often (or not at all) for a while",
        )


class ProjectionFailed(ProjectionError):
    """A projection's handler raised on the event at ``position``: the projection is
    stopped (the store and other projections carry on), its read model and position
    are unchanged (the failed batch was rolled back), and the error is recorded for
    ``statekeeper projections status``. Fix the handler, then run it again: it resumes
    at the failed event."""

    def __init__(self, name: str, position: int, agent_id: str, seq: int, error: str) -> None:
        self.name = name
        self.position = position
        self.agent_id = agent_id
        self.seq = seq
        self.error = error
        super().__init__(
            f"projection {name!r} stopped at feed position {position} "
            f"({agent_id!r} seq {seq}): {error}"
        )


class FeedCursorMismatch(InvalidArgument):
    """A cursor made for another layout: its number of shards is not the store's.
    An agent's shard depends on the number of shards, so a cursor cannot be carried
    over; nothing was read."""

    def __init__(self, cursor_shards: int, store_shards: int) -> None:
        self.cursor_shards = cursor_shards
        self.store_shards = store_shards
        super().__init__(
            "from_position",
            f"the feed cursor has {cursor_shards} shard position(s) but this store's feed"
            f" has {store_shards} shard(s): it was taken on a store with another layout",
        )


class FeedChanged(InvalidArgument):
    """A feed cursor (or a projection's stored position) taken on another feed: the
    feed id it carries (``cursor_feed``) is not this store's (``store_feed``). A
    restore, an import into a new store or a re-created store numbers the events
    anew, so the cursor's positions name other events here: resuming from it would
    skip some and deliver others twice. Nothing was read. Rebuild what was derived
    from the events (``statekeeper projections rebuild NAME``; ``since_floor=True`` on
    a trimmed feed) and subscribe again from position 0 (or the feed's floor) of this
    store."""

    def __init__(
        self,
        cursor_feed: str,
        store_feed: str,
        *,
        what: str = "the feed cursor",
        remedy: str = "Rebuild what you derived from the events (statekeeper projections"
        " rebuild NAME) and subscribe again from position 0 of this store (or its floor:"
        " since_floor)",
    ) -> None:
        self.cursor_feed = cursor_feed
        self.store_feed = store_feed
        super().__init__(
            "from_position",
            f"{what} was taken on feed {cursor_feed}, but this store's feed is {store_feed}"
            " (a restore, an import into a new store or a re-created store numbers the"
            f" events anew: its positions name other events here). {remedy}",
        )


class FeedRewound(FeedChanged):
    """A feed cursor whose position now holds another event than the one it passed:
    the store's feed went back and handed the position out again (a failover to a
    replica that missed the newest commits, a server restored under its clients). The
    events stored since at the positions up to the cursor's were never delivered to
    it: resuming would skip them. ``position`` (of ``shard``, on a sharded store) is
    where it was found; nothing was read. Rebuild what was derived from the events, as
    for :class:`FeedChanged`."""

    def __init__(self, feed: str, position: int, shard: int | None = None) -> None:
        self.cursor_feed = feed
        self.store_feed = feed
        self.position = position
        self.shard = shard
        where = f" of shard {shard}" if shard is not None else ""
        InvalidArgument.__init__(
            self,
            "from_position",
            f"the feed cursor passed an event at position {position}{where} that this store"
            " no longer holds: another event is stored there now (the store went back, as"
            " in a failover to a replica that missed the newest commits, and gave the"
            " position out again), and the events stored since up to the cursor were never"
            " delivered to it. Rebuild what you derived from the events (statekeeper"
            " projections rebuild NAME) and subscribe again from position 0 of this store"
            " (or its floor: since_floor)",
        )
