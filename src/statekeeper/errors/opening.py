"""Errors of opening a store and its files, and of a store or agent lost.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from statekeeper.errors import storage as _storage
from statekeeper.errors.base import ConfigurationError, StatekeeperError
from statekeeper.errors.storage import BackendError, IntegrityError

# assigned from their module, not imported by name: Python 3.11 compiles a method call
# on an imported name (``StatekeeperError.__init__(self, ...)``) as an attribute load
# and a plain call, on a name the module assigns as a method call; the constructors
# keep the bytecode they had before errors.py was split (issue 11)
StorageError = _storage.StorageError


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
