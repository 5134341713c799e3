"""The audit log's records: its stream and marker, the operations, an entry, a head
and a report (:mod:`statekeeper.governance.audit`), and the JSON body an entry is sealed
from (and read back into an :class:`AuditEntry`); a witness of the head kept in a file
(``statekeeper audit verify --witness FILE``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from ..arguments import AUDIT_STREAM
from ..errors import ConfigurationError, IntegrityError
from ..records import AuditMark as Mark

__all__ = [
    "AUDIT_ID",
    "KEPT_MARKER",
    "KNOWN_OPERATIONS",
    "OPERATIONS",
    "AuditEntry",
    "AuditHead",
    "AuditReport",
    "read_witness",
    "write_witness",
]

#: the stream the audit log is kept in (internal: hidden from listings)
AUDIT_ID = AUDIT_STREAM
#: the store-level marker (``Backend.set_marker``) of a store that keeps an audit log:
#: set once its first entry is committed, so a log deleted whole is told from none
KEPT_MARKER = "audit-log"
#: the outcome of the entry a writer puts first in a log it finds empty in a store
#: marked as keeping one (the earlier log was deleted)
MISSING = "log-missing"
_KIND = "audit"
#: the head's link (``Backend.audit_links``) is a snapshot record of the log at its head
#: (a snapshot carries the link of the event at its seq), whose body says nothing
_LINK_KIND = "snapshot"
_LINK_BODY = b"{}"
_PAGE = 500
_RETRIES = 1000

#: the operations a store records (tools may add their own names)
OPERATIONS = (
    "create",
    "save",
    "append",
    "transition",
    "snapshot",
    "delete",
    "lease",
    "lease-release",
    "lease-lost",
    "rekey",
    "migrate",
    "policy",
    "purge",
    "forget",
    "get",
    "load",
    "head",
    "history",
    "list",
    "digest",
    "verify",
    "find_key",
    "size",
)

#: every operation statekeeper itself records: the store's (:data:`OPERATIONS`) and those of
#: its governance tools (holds, retention, backups, leases, the change feed, repair...)
KNOWN_OPERATIONS = (
    *OPERATIONS,
    "append_batch",
    "audit",
    "backup",
    "compact",
    "expire-keys",
    "hold",
    "projections",
    "release-hold",
    "repair",
    "restore",
    "retention",
    "subscribe",
    "thin-snapshots",
    "trim_feed",
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One verified entry of the audit log."""

    seq: int
    time: float
    principal: str | None
    operation: str
    outcome: str
    agent_id: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object (``time`` in epoch seconds; ``statekeeper audit --json``
        prints it with ``time`` as ISO 8601 in UTC, as every ``--json`` time)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AuditHead:
    """A commitment to the log up to ``seq`` (keyed): kept outside the store, it
    shows later that the log was rolled back or rewritten (see :meth:`AuditLog.verify`)."""

    seq: int
    key_id: str | None
    digest: str

    def dumps(self) -> str:
        """JSON text of the head (what a witness file holds)."""
        return json.dumps({"format": "statekeeper-audit-head/1", **asdict(self)})

    @classmethod
    def loads(cls, text: str, source: str = "witness") -> AuditHead:
        """The head written by :meth:`dumps`; ConfigurationError naming ``source``."""
        try:
            data = json.loads(text)
            if data.get("format") != "statekeeper-audit-head/1":
                raise ValueError("not an audit head")
            seq, key_id, digest = data["seq"], data["key_id"], data["digest"]
            if type(seq) is not int or seq < 0 or type(digest) is not str:
                raise ValueError("bad fields")
            if key_id is not None and type(key_id) is not str:
                raise ValueError("bad key id")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(f"{source} is not an audit head file") from None
        return cls(seq, key_id, digest)


@dataclass(slots=True)
class AuditReport:
    """What :meth:`AuditLog.verify` found: ``entries`` checked, the ``head`` now (None
    for an empty log) and every problem (empty: the log is intact)."""

    entries: int = 0
    head: AuditHead | None = None
    problems: list[str] = field(default_factory=list)
    #: entries written ahead of a mutation (engines without a shared commit, and
    #: deletes) whose mutation is not in the store: the writer died between the two.
    #: Not a problem of the log (it never lost an entry), a fact about the store.
    unapplied: list[str] = field(default_factory=list)
    #: per operation, the entries whose change could not be compared with the store
    #: (see :mod:`statekeeper.governance.audit_checks` for what is and why)
    unchecked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def _body(
    operation: str,
    principal: str | None,
    agent_id: str | None,
    first_seq: int | None,
    last_seq: int | None,
    outcome: str,
    detail: Mapping[str, Any] | None,
) -> bytes:
    body: dict[str, Any] = {
        "principal": principal,
        "op": operation,
        "outcome": outcome,
        "agent": agent_id,
        "seqs": [first_seq, last_seq] if first_seq is not None else None,
    }
    if detail:
        body["detail"] = dict(detail)
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


def _mark_body(mark: Mark, ahead: Any) -> bytes:
    return _body(
        mark.operation,
        mark.principal,
        mark.agent_id,
        mark.first_seq,
        mark.last_seq,
        "ok",
        None if ahead is None else {"ahead": ahead},
    )


def _reason(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, IntegrityError) else str(exc)


def _entry(seq: int, ts: float, body: bytes) -> AuditEntry:
    data = orjson.loads(body)
    seqs = data.get("seqs") or (None, None)
    return AuditEntry(
        seq=seq,
        time=ts,
        principal=data.get("principal"),
        operation=data.get("op", "?"),
        outcome=data.get("outcome", "?"),
        agent_id=data.get("agent"),
        first_seq=seqs[0],
        last_seq=seqs[1],
        detail=data.get("detail") or {},
    )


def read_witness(path: str | os.PathLike[str]) -> AuditHead | None:
    """The audit head kept in ``path`` (None when the file does not exist yet)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
    return AuditHead.loads(text, os.fspath(path))


def write_witness(path: str | os.PathLike[str], head: AuditHead) -> None:
    """Keep ``head`` in ``path`` (written to a temporary file, then renamed)."""
    from pathlib import Path

    from .._files import write_atomically

    write_atomically(Path(os.fspath(path)), head.dumps() + "\n")
