"""Governance: who may do what to which agents, and a verifiable record of what was done.

* Namespaces and principals (:mod:`.principals`): an agent id's namespace is the part
  before its last ``/``; a store is opened as a principal.
* Policies (:mod:`.policy`, files in :mod:`.policy_file`): principal or role ->
  namespace patterns -> ``read`` / ``write`` / ``admin``, enforced by the store on
  every call (``StateStore(url, principal=..., policy=...)``).
* The audit log (:mod:`.audit`): every mutation and refusal, hash-chained and keyed,
  in the store's own backend; ``statekeeper audit`` lists and verifies it.
* Retention (:mod:`.retention`), crypto-shredding (:mod:`.shredding`) and encrypted
  backups (:mod:`.backup`): tools that drive a store, reporting to the audit log
  through :mod:`.hooks`.

See ``docs/governance.md`` and ``docs/retention-and-backup.md``. Names load on first
use (this package is imported only by programs that govern a store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attribute

if TYPE_CHECKING:
    from .audit import Audit, AuditEntry, AuditHead, AuditLog, AuditReport
    from .policy import Policy
    from .policy_file import load_policy, parse_policy
    from .principals import namespace_of, qualify, split_id

__all__ = [
    "Audit",
    "AuditEntry",
    "AuditHead",
    "AuditLog",
    "AuditReport",
    "Policy",
    "load_policy",
    "namespace_of",
    "parse_policy",
    "qualify",
    "split_id",
]

_WHERE = {
    "Audit": "audit",
    "AuditEntry": "audit",
    "AuditHead": "audit",
    "AuditLog": "audit",
    "AuditReport": "audit",
    "Policy": "policy",
    "load_policy": "policy_file",
    "parse_policy": "policy_file",
    "namespace_of": "principals",
    "qualify": "principals",
    "split_id": "principals",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _WHERE, name)
