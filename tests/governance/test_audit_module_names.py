"""The audit log's names stay where callers import them from: ``governance.audit`` puts
``AuditLog`` together from its parts (records, chain, writing, batches, reading,
verifying) and re-exports every name it offered as one module."""

from __future__ import annotations

import importlib

import pytest

from statekeeper.governance import audit

#: every name imported from statekeeper.governance.audit before it was split
NAMES = (
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
)

#: the public methods of AuditLog before the split
METHODS = (
    "check_readable",
    "entries",
    "head",
    "record",
    "record_ahead",
    "record_ahead_many",
    "record_with",
    "record_with_change",
    "records_with_writes",
    "rewrite_with",
    "verify",
    "void",
    "void_many",
    "write_with",
)


@pytest.mark.parametrize("name", NAMES)
def test_a_name_of_the_audit_module_still_imports(name: str) -> None:
    assert getattr(audit, name) is not None


@pytest.mark.parametrize("name", ["Audit", "AuditEntry", "AuditHead", "AuditLog", "AuditReport"])
def test_the_package_names_are_the_modules(name: str) -> None:
    governance = importlib.import_module("statekeeper.governance")
    assert getattr(governance, name) is getattr(audit, name)


def test_audit_log_has_every_method_it_had() -> None:
    missing = [m for m in METHODS if not hasattr(audit.AuditLog, m)]
    assert not missing
