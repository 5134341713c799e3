"""A write PostgreSQL refused for the database role's privileges (SQLSTATE 42501,
``insufficient_privilege``, which row-level security's "new row violates row-level
security policy" also raises): :class:`~statekeeper.errors.AccessDenied` naming the
role and the agent, never the server's SQL text or its ``CONTEXT`` (the internal
statements and function signatures of the store). A write refused because the session is
read-only (SQLSTATE 25006: a hot standby, ``default_transaction_read_only``) gets the same
treatment (:func:`read_only`): a :class:`~statekeeper.errors.BackendRejected` saying so,
without the server's SQL. A failure met while the store opens inside an operation is
labelled as the opening (:func:`mark_opening`, :func:`label`), not as that operation."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import AccessDenied, AuditLogLocked, BackendRejected, FeedLocked

if TYPE_CHECKING:
    from ...records import AppendRequest, StreamChange

__all__ = [
    "audit_locked",
    "denied",
    "feed_locked",
    "filtered_at_head",
    "label",
    "mark_opening",
    "read_only",
    "row_security_refusal",
    "together_what",
]

INSUFFICIENT_PRIVILEGE = "42501"
READ_ONLY_SQL_TRANSACTION = "25006"
LOCK_NOT_AVAILABLE = "55P03"
#: set on a driver error met while the store opens (creates or upgrades its schema)
_OPENING = "_statekeeper_opening"
#: ``append to 'acme/x'``, ``lease_acquire of 'acme/x'``: the agent as its repr
_AGENT = re.compile(r"""\s('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")$""")


def denied(what: str, exc: BaseException, dsn: str) -> AccessDenied | None:
    """The refusal of ``what`` (``append to 'x'``...) by ``exc`` as AccessDenied, or
    None when ``exc`` is not a privilege failure (or opening the store failed: a
    migration refused stays BackendRejected). ``dsn``: the connection's (its role)."""
    if getattr(exc, "sqlstate", None) != INSUFFICIENT_PRIVILEGE or what.startswith("cannot open"):
        return None
    role = _role(dsn)
    diag = getattr(exc, "diag", None)
    primary = str(getattr(diag, "message_primary", None) or "")
    what = what.removesuffix(" failed")
    agent_id: str | None = None
    found = _AGENT.search(what)
    if found is not None:
        try:
            agent_id = str(ast.literal_eval(found.group(1)))
        except (ValueError, SyntaxError):
            agent_id = None
        what = what[: found.start()]
    operation = what.split()[1] if len(what.split()) > 1 else what  # after the engine
    if operation.startswith(("lease", "delete")):  # lease_acquire, delete_agent_at...
        operation = operation.partition("_")[0]
    if "row-level security" in primary:
        return row_security_refusal(dsn, operation, agent_id)
    # a grant missing: the server's one line (no SQL in it), never its CONTEXT
    reason = f"the database role {_who(role)} lacks the privilege: {primary or 'permission denied'}"
    return AccessDenied(role or "", "write", operation, agent_id, reason)


def row_security_refusal(dsn: str, operation: str, agent_id: str | None) -> AccessDenied:
    """``operation`` on ``agent_id`` refused by row-level security (an insert the
    server rejected, or a delete it filtered to nothing: see :mod:`.deletes`)."""
    role = _role(dsn)
    reason = (
        f"the database role {_who(role)} may not write that namespace: refused by"
        " PostgreSQL row-level security"
    )
    return AccessDenied(role or "", "write", operation, agent_id, reason)


def _who(role: str | None) -> str:
    return repr(role) if role else "the store connects as"


def _role(dsn: str) -> str | None:
    """The database role the store connects as (None: the driver's default)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        user = conninfo_to_dict(dsn).get("user")
    except psycopg.Error:
        return None
    return str(user) if user else None


def read_only(what: str, exc: BaseException) -> BackendRejected | None:
    """The refusal of ``what`` by a read-only session (SQLSTATE 25006), or None: the
    server's SQL text and the store's function signatures (its ``CONTEXT``) left out."""
    if getattr(exc, "sqlstate", None) != READ_ONLY_SQL_TRANSACTION:
        return None
    return BackendRejected(
        f"{what}: the PostgreSQL session is read-only (a hot standby, or "
        "default_transaction_read_only set for the role, database or connection); nothing "
        "was written: connect to the primary with a writable session, or open the store "
        "read-only",
        sqlstate=READ_ONLY_SQL_TRANSACTION,
    )


def audit_locked(what: str, exc: BaseException, timeout: float) -> AuditLogLocked | None:
    """``what`` waited for the audit log's head row past ``timeout`` seconds (SQLSTATE
    55P03 raised in ``sk_audit_head_lock``, migration 24), or None."""
    if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
        return None
    diag = getattr(exc, "diag", None)
    if "sk_audit_head_lock" not in (getattr(diag, "context", None) or ""):
        return None
    return AuditLogLocked(
        f"{what}: the store's audit log is locked by another transaction (its head row"
        " locked by a role, SELECT ... FOR UPDATE, or a governed write left uncommitted)"
        f" for longer than audit_lock_timeout ({timeout:g}s); every governed write waits"
        " on it. Nothing was written: write again; the transaction holding it (see"
        " pg_blocking_pids) is the one to end"
    )


def feed_locked(what: str, exc: BaseException, timeout: float) -> FeedLocked | None:
    """``what`` waited for the change feed's advisory lock past ``timeout`` seconds
    (SQLSTATE 55P03 raised in the bounded ``sk_feed_mark`` of a store under row
    security, migration 25), or None."""
    if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
        return None
    diag = getattr(exc, "diag", None)
    if "sk_feed_mark" not in (getattr(diag, "context", None) or ""):
        return None
    return FeedLocked(
        f"{what}: the store's change feed is locked by another transaction (its advisory"
        " lock taken exclusively, pg_advisory_xact_lock(23117, ...), which every database"
        f" role may call) for longer than audit_lock_timeout ({timeout:g}s); every write"
        " of events waits on it. Nothing was written: write again; the transaction"
        " holding it (see pg_locks) is the one to end"
    )


def mark_opening(exc: BaseException) -> None:
    """Mark ``exc`` as met while the store opened (see :func:`label`)."""
    setattr(exc, _OPENING, True)


def label(what: str, exc: BaseException, schema: str, readonly: bool) -> str:
    """``what`` failed with ``exc``: the opening of the store when ``exc`` was met
    while it opened (``"cannot open PostgreSQL schema 'x' (creating or upgrading its
    tables) for read_state"``), else ``what`` itself."""
    if not getattr(exc, _OPENING, False) or what.startswith("cannot open"):
        return what
    during = what.removeprefix("postgresql ").removesuffix(" failed")
    doing = "" if readonly else " (creating or upgrading its tables)"
    return f"cannot open PostgreSQL schema {schema!r}{doing} for {during}"


def together_what(requests: Sequence[AppendRequest], changes: Sequence[StreamChange]) -> str:
    """What a refused ``append_together`` did, as :func:`denied` reads it: the
    delete of the agent its change names (a delete and its feed tombstone or audit
    entry), else the append to its first request's agent (none: its first change)."""
    for change in changes:
        if change.delete_at is not None:
            return f"postgresql delete_agent_at of {change.agent_id!r}"
    if not requests:
        first = changes[0]
        what = "rewrite" if first.rewrite else "prune" if first.prune_to is not None else "change"
        return f"postgresql {what} of {first.agent_id!r}"
    return f"postgresql append to {requests[0].agent_id!r}"


def filtered_at_head(request: AppendRequest, row: tuple[Any, ...]) -> bool:
    """Whether ``sk_append``'s reply ``row`` is a conflict at the head ``request``
    expected: its head row's UPDATE matched nothing with the head where it was, as
    when row-level security filtered it away (or the head tag differs: see
    :meth:`.appends.Appends._refuse`, which asks the policy)."""
    return int(row[0]) == 2 and request.expected_seq > 0 and int(row[1]) == request.expected_seq
