"""``rekey`` and ``migrate`` on a governed store whose engine commits several streams
together (memory, SQLite, PostgreSQL): each agent's rewrite commits with its audit
entry (``append_together``), the engine's own ``rewrite`` / ``rewrite_many`` are not
used, no entry is written ahead, and ``audit verify`` is clean with nothing left
unchecked. (The crash side: test_audit_crash_rekey.py, test_audit_crash_migrate.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.observability import instrument
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from statekeeper.security import Keyring
from statekeeper.security.rekey import rekey

from ..backends._services import fresh_url
from ..schema import apps

OLD = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
NEW = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.fixture(params=[False, True], ids=["plain", "instrumented"])
def instrumented(request: pytest.FixtureRequest) -> bool:
    """With metrics on (``observability.instrument``): the store's backend is then the
    engine's wrapper, which must declare and forward what the engine commits together
    (was: it did not, and rekey and migrate went entry first)."""
    return bool(request.param)


def _observe(store: StateStore, instrumented: bool) -> None:
    if instrumented:
        instrument(store, registry=CollectorRegistry(), tracing=False)


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


def _count(backend: Any, names: tuple[str, ...]) -> list[str]:
    """Record the agent streams each of ``names`` is called for (not the audit log's)."""
    calls: list[str] = []
    for name in names:
        method = getattr(backend, name)

        async def call(arg: Any, _m: Any = method, _n: str = name) -> Any:
            ids = [r.agent_id for r in arg] if isinstance(arg, list) else [arg.agent_id]
            calls.extend(f"{_n}:{i}" for i in ids if not i.startswith("\x01"))
            return await _m(arg)

        setattr(backend, name, call)
    return calls


async def test_rekey_commits_each_agent_with_its_entry(url: str, instrumented: bool) -> None:
    old = Keyring({"k1": OLD})
    async with StateStore(
        url, keyring=old, principal="ops", policy=POLICY, audit=Audit(), witness=False
    ) as store:
        for i in range(3):
            for n in range(3):
                await store.save(f"acme/r{i}", {"n": n})
        await store.snapshot("acme/r1")
        backend = store.backend
        keys = Keyring({"k1": OLD, "k2": NEW}, active="k2")
        async with StateStore(
            backend, keyring=keys, principal="ops", policy=POLICY, audit=Audit(), witness=False
        ) as rotating:
            _observe(rotating, instrumented)
            calls = _count(rotating.backend, ("rewrite", "rewrite_many"))
            await rekey(rotating)
            assert calls == []  # every agent's rewrite went with its entry
            log = AuditLog(backend, keys)
            entries = [e async for e in log.entries(operation="rekey") if e.agent_id]
            assert sorted(e.agent_id or "" for e in entries) == ["acme/r0", "acme/r1", "acme/r2"]
            for e in entries:
                assert "ahead" not in e.detail and e.outcome == "ok", e
                assert (e.detail["key"], e.detail["head"]) == ("k2", 3)
            assert entries[1].detail["records"] == 4  # 3 events and the snapshot
            for i in range(3):
                raws = await backend.read(f"acme/r{i}", 0)
                assert {Codec.header(r.payload).key_id for r in raws} == {"k2"}  # type: ignore[union-attr]
                assert (await rotating.load(f"acme/r{i}")).data == {"n": 2}
            report = await log.verify()
            assert report.ok and not report.unapplied and not report.unchecked, report
            # again: nothing left to re-encrypt, an entry saying so (no change to share)
            await rekey(rotating)
            again = [e async for e in log.entries(operation="rekey") if e.agent_id][3:]
            assert [e.detail["records"] for e in again] == [0, 0, 0]
            assert calls == []


async def test_a_migration_page_commits_with_its_entries(url: str, instrumented: bool) -> None:
    keys = Keyring({"k1": OLD})
    async with StateStore(
        url, keyring=keys, principal="ops", policy=POLICY, audit=Audit(), witness=False
    ) as store:
        states = TypedStates(store, apps.support_v1)
        for i in range(4):
            await states.create(f"a{i}", apps.SupportV1(customer_name=f"c{i}", tags=[]))
        _observe(store, instrumented)
        calls = _count(store.backend, ("rewrite", "rewrite_many"))
        report = await migrate(store, apps.support_v2)
        assert report.changed == 4
        assert calls == []
        log = AuditLog(store.backend, keys)
        entries = [e async for e in log.entries(operation="migrate") if e.agent_id]
        assert sorted(e.agent_id or "" for e in entries) == ["a0", "a1", "a2", "a3"]
        assert all("ahead" not in e.detail and e.outcome == "ok" for e in entries)
        verified = await log.verify()
        assert verified.ok and not verified.unapplied, verified
