"""The audit log: an append-only, hash-chained, keyed record of what was done.

Every mutation a governed store makes (create, save, append, transition, snapshot,
delete, lease taken, released and lost, rekey, migrate, policy change, purge) and
every refusal is one **entry**: who (``principal``), when, which agent and seq range,
the operation and its outcome (``ok``, ``denied``, ``error:<Type>``). Reads are
recorded too with ``Audit(reads=True)``.

**Where.** The log is a stream of the store's own backend (id ``"\\x01sk-audit/log"``,
hidden from listings), written through the backend contract every engine implements,
so every backend has it. **How it is protected** is how agent streams are: each entry
is a record of the codec (:mod:`statekeeper.codec.pipeline`) sealed with AES-256-GCM
under the audit keyring and chained to the one before it, and the stream head carries
an HMAC-SHA256 tag over the last link; each append is a compare-and-set on that head,
so concurrent writers (processes) interleave without losing an entry (on PostgreSQL
under row-level security, where a tenant's database role may read no entry, each append
also leaves its last entry's link, sealed: ``Backend.audit_links``, and the next writer
chains on that). Without the key no entry can be forged, altered, removed or re-ordered
unseen:

* an **edited** entry fails authentication;
* a **deleted** entry leaves a gap in the seqs or a broken chain;
* a **truncated** log no longer matches its authenticated head;
* a log **deleted** whole: the store-level marker :data:`KEPT_MARKER`, set once the
  log's first entry is committed, says there was one (and a writer that finds the log
  empty in a marked store records that first in the new log); the marker itself can be
  removed with the log by whoever can write the database: a witness catches that;
* a log **rolled back** as a whole (an old copy restored) is consistent with itself:
  that is caught, as for agent streams, by a *witness* of the head kept elsewhere
  (:class:`AuditHead`; ``statekeeper audit verify --witness FILE`` keeps one up to
  date and checks the log against it).

**Durable with the write.** No mutation without its entry. On an engine that commits
several streams' appends atomically (``Backend.appends_together``: memory, SQLite,
PostgreSQL, Redis on one server) the entries of appends (create, save, append,
transition; sync, group and write-behind alike) are written in the *same commit* as
the appends (:meth:`AuditLog.record_with`, :meth:`AuditLog.write_with`), and so are
deletes, snapshots and retention's compactions, thinnings and purges; on memory,
SQLite and PostgreSQL also leases (grant and release) and each agent's key rotation
(its whole stream's rewrite) (:meth:`AuditLog.record_with_change`), and a migration
page's rewrites (:meth:`AuditLog.rewrite_with`): after a crash at any point both exist
or neither does. Elsewhere (Redis Cluster, S3, tiered; leases and rewrites on Redis),
for ``forget`` (the data key is destroyed in the key vault, another database) and for
a rekey of an agent too large to hold in memory
(``statekeeper.security.rekey.TOGETHER_MAX``), the entry is written *first*
(marked ``ahead``; :meth:`AuditLog.record_ahead`) and voided by a second entry when
the mutation fails: a crash between the two leaves at worst an entry of a change not
made, which :meth:`AuditLog.verify` reports in ``unapplied``.

**Where each part lives** (this module keeps :class:`Audit` and puts :class:`AuditLog`
together; every name is importable from here): the records, operations, entry bodies
and witness files in :mod:`.audit_records`; the hash chain (cached head, sealing, the
retry loop, the authenticated head) in :mod:`.audit_chain`; writing entries in
:mod:`.audit_write` and batches of writes with theirs in :mod:`.audit_batch`; reading
in :mod:`.audit_read`; verifying in :mod:`.audit_verify` (with :mod:`.audit_checks`,
:mod:`.audit_claims` and :mod:`.audit_holds`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..records import AuditMark as Mark
from .audit_batch import _AuditBatch
from .audit_records import (
    AUDIT_ID,
    KEPT_MARKER,
    KNOWN_OPERATIONS,
    MISSING,
    OPERATIONS,
    AuditEntry,
    AuditHead,
    AuditReport,
    read_witness,
    write_witness,
)
from .audit_verify import _AuditVerifier
from .audit_write import _AuditWriter

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring

__all__ = [
    "AUDIT_ID",
    "KEPT_MARKER",
    "KNOWN_OPERATIONS",
    "MISSING",
    "OPERATIONS",
    "Audit",
    "AuditEntry",
    "AuditHead",
    "AuditLog",
    "AuditReport",
    "Mark",
    "read_witness",
    "write_witness",
]


class Audit:
    """How a store keeps its audit log (``StateStore(..., audit=Audit())``).

    Args:
        keyring: the keys the log is sealed with (a
            :class:`~statekeeper.security.Keyring`). None: the store's own keyring
            (a store without one then refuses to open: an audit log needs a key).
        reads: record reads (load, history, listing...) too, not only mutations
            and refusals.
        clock: the source of entry times.
    """

    def __init__(
        self,
        keyring: Keyring | None = None,
        *,
        reads: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if type(reads) is not bool:
            raise ConfigurationError(f"reads must be True or False, not {reads!r:.40}")
        self.keyring = keyring
        self.reads = reads
        self.clock = clock

    def open(self, backend: Backend, keyring: Keyring | None) -> AuditLog:
        """The audit log on ``backend`` (``keyring``: the store's, used when this
        has none)."""
        keys = self.keyring if self.keyring is not None else keyring
        if keys is None:
            raise ConfigurationError(
                "an audit log needs a key: give the store a keyring, or Audit(keyring=...)"
            )
        return AuditLog(backend, keys, reads=self.reads, clock=self.clock)


class AuditLog(_AuditWriter, _AuditBatch, _AuditVerifier):
    """The audit log of one backend: record entries, read and verify them."""
