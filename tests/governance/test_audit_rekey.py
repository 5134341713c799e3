"""``rekey`` re-encrypts the audit log too: after it, with the old key removed, the log
verifies and reads; the old key alone reads nothing of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import open_backend
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.security import Keyring
from statekeeper.security.rekey import key_usage, rekey

from ..backends._services import fresh_url

OLD = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
NEW = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n[principals.app]\nadmin = ["acme/**"]\n')


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


async def _entries(log: AuditLog) -> list[tuple[str, str | None]]:
    return [(e.operation, e.agent_id) async for e in log.entries()]


@pytest.mark.parametrize("principal", [None, "ops"])
async def test_rekey_reencrypts_the_audit_log(url: str, principal: str | None) -> None:
    backend = open_backend(url)
    try:
        old = Keyring({"k1": OLD})
        writer = StateStore(backend, keyring=old, principal="ops", policy=POLICY, audit=Audit())
        for i in range(7):
            await writer.save(f"acme/a{i % 2}", {"n": i})
        before = await _entries(AuditLog(backend, old))
        assert len(before) == 7

        both = Keyring({"k1": OLD, "k2": NEW}, active="k2")
        if principal is None:
            rotating = StateStore(backend, keyring=both)
        else:
            rotating = StateStore(
                backend, keyring=both, principal=principal, policy=POLICY, audit=Audit()
            )
        await rekey(rotating)
        usage = await key_usage(rotating)
        assert "k1" not in usage, usage  # nothing, the audit log included, needs k1 now

        new_only = Keyring({"k2": NEW})
        log = AuditLog(backend, new_only)
        report = await log.verify()
        assert report.ok, report.problems
        after = await _entries(log)
        assert after[: len(before)] == before  # the same entries, under the new key
        if principal == "ops":  # the run of a principal is itself recorded
            assert after[-1] == ("rekey", None)

        old_only = AuditLog(backend, Keyring({"k1": OLD}))
        report = await old_only.verify()
        assert not report.ok and report.entries == 0  # the old key opens no entry
    finally:
        await backend.close()


async def test_a_namespace_admin_leaves_the_log_alone(url: str) -> None:
    backend = open_backend(url)
    try:
        old = Keyring({"k1": OLD})
        writer = StateStore(backend, keyring=old, principal="ops", policy=POLICY, audit=Audit())
        await writer.save("acme/a", {"n": 1})
        both = Keyring({"k1": OLD, "k2": NEW}, active="k2")
        narrow = StateStore(backend, keyring=both, principal="app", policy=POLICY)
        await rekey(narrow)
        # the agent moved; the store-wide log still needs k1 (a store admin's run moves it)
        assert (await key_usage(StateStore(backend, keyring=both)))["k1"] > 0
        assert (await AuditLog(backend, old).verify()).ok
    finally:
        await backend.close()
