"""Errors of storing and reading state: conflicts, integrity, size and serialization.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from statekeeper.errors import base as _base

# assigned from their module, not imported by name: Python 3.11 compiles a method call
# on an imported name (``StatekeeperError.__init__(self, ...)``) as an attribute load
# and a plain call, on a name the module assigns as a method call; the constructors
# keep the bytecode they had before errors.py was split (issue 11)
StatekeeperError = _base.StatekeeperError


class BackendUnavailable(StatekeeperError):
    """The requested storage backend is not available (not installed, or not built yet),
    or its server cannot be reached at all when it is first used (refused, unresolvable
    host, missing database, bad login, no answer within the connect timeout). The message
    gives the server's or driver's own reason; nothing was written."""


class StoreClosed(StatekeeperError):
    """An operation was attempted on a store or backend that has been closed."""


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


class AuditLogLocked(BackendError):
    """A write's audit entry waited for the audit log's head longer than the backend's
    ``audit_lock_timeout`` (PostgreSQL): another transaction holds the head row locked
    (a role's ``SELECT ... FOR UPDATE`` of it, or a governed write left uncommitted) and
    every governed write of the store waits on it. Nothing was written
    (``maybe_applied`` is False): the same write may be made again; the transaction
    holding the lock is the one to end."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class FeedLocked(BackendError):
    """A write's events waited for the change feed's lock longer than the backend's
    ``audit_lock_timeout`` (PostgreSQL under row-level security): another transaction
    holds the feed's advisory lock exclusively (``pg_advisory_xact_lock(23117, ...)``,
    which every database role may call: only a superuser could revoke it), and every
    write of the store waits on it. Nothing was written (``maybe_applied`` is False):
    the same write may be made again; the transaction holding the lock (see
    ``pg_locks``) is the one to end."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


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
