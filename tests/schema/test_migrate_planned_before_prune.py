"""A migration whose rewrite an engine refuses as planned before a retention prune
(``RewriteBelowPrunedBase``: nothing of it written), and its retries' pauses.

A migration's rewrite carries the head event and a snapshot at the head only, and a
prune's base is below the head, checked after the head: a real prune landing between
the plan and the commit does not refuse it (the first test). An engine that does
refuse one (a page committed together is refused whole) stopped the whole run with a
ConfigurationError; now the agents of the refused page are read and planned again, one
by one, a bounded number of times, pausing between tries; a refusal on every try is
reported naming the agent, the agent left as it was. Every retry of the 50 (a head
moved by a live writer too) pauses first: was, at once."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError, RewriteBelowPrunedBase
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy, Rule
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import finalize, migrate, rollback
from statekeeper.schema.report import RETRIES
from statekeeper.security import Keyring, generate_key

from . import apps
from ._stores import store_url

#: the module (``statekeeper.schema.migrate`` the package attribute may be the function)
MIGRATE = importlib.import_module("statekeeper.schema.migrate")
KEYS = Keyring({"k1": generate_key()})
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


async def _populate(store: StateStore, n: int = 3) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(n):
        await states.create(f"a{i}", apps.SupportV1(customer_name=f"c{i}", tags=[]))
        for t in range(4):
            state = await states.load(f"a{i}")
            state.tags.append(str(t))
            await states.save(f"a{i}", state)  # head at seq 5
    await store.flush()


async def _versions(store: StateStore) -> dict[str, int]:
    return {f"a{i}": (await store.load(f"a{i}")).schema_version for i in range(3)}


def _refuse(
    store: StateStore, times: int | None, *, hot: Callable[[], bool] | None = None
) -> list[str]:
    """Make the engine refuse the migration's rewrites of ``a1`` as planned before a
    prune (nothing written; a page holding it, whole), ``times`` times (None: always),
    and only while ``hot()`` says so when given. Returns the log of the refusals."""
    backend = store.backend
    log: list[str] = []

    def refusing(requests: Any) -> bool:
        named = any(r.agent_id == "a1" for r in requests)
        return named and (times is None or len(log) < times) and (hot is None or hot())

    def refusal() -> RewriteBelowPrunedBase:
        log.append("refused")
        return RewriteBelowPrunedBase("a1", 2, 3)

    rewrite, many, together = backend.rewrite, backend.rewrite_many, backend.append_together

    async def one(request: Any) -> Any:
        if refusing([request]):
            raise refusal()
        return await rewrite(request)

    async def page(requests: Any) -> Any:
        if refusing(requests):
            raise refusal()
        return await many(requests)

    async def with_changes(requests: Any, changes: Any = (), *rest: Any, **kw: Any) -> Any:
        if refusing([c.rewrite for c in changes if c.rewrite is not None]):
            raise refusal()
        return await together(requests, changes, *rest, **kw)

    backend.rewrite = one  # type: ignore[method-assign]
    backend.rewrite_many = page  # type: ignore[method-assign]
    backend.append_together = with_changes  # type: ignore[method-assign]
    return log


async def test_a_prune_between_the_plan_and_the_commit_does_not_refuse_it(url: str) -> None:
    async with StateStore(url, snapshot_every=2) as store:
        await _populate(store)
        real = store.backend.rewrite_many
        pruned: list[Any] = []

        async def page(requests: Any) -> Any:
            if not pruned:  # the retention run lands on the planned page
                keep_1 = RetentionPolicy(rules=(Rule("*", keep_last=1),))
                pruned.append(await apply_retention(store, keep_1))
            return await real(requests)

        store.backend.rewrite_many = page  # type: ignore[method-assign]
        report = await migrate(store, apps.support_v2)
        assert pruned and all(a.outcome == "done" for a in pruned[0].actions)
        assert report.changed == 3 and report.ok, report.failed
        assert await _versions(store) == {"a0": 2, "a1": 2, "a2": 2}


async def test_a_page_refused_as_planned_before_a_prune_is_planned_again(url: str) -> None:
    async with StateStore(url, snapshot_every=2) as store:
        await _populate(store)
        log = _refuse(store, 1)
        report = await migrate(store, apps.support_v2)
        assert log == ["refused"]
        assert report.changed == 3 and report.ok and report.retries >= 1, report.failed
        assert await _versions(store) == {"a0": 2, "a1": 2, "a2": 2}


async def test_a_governed_page_refused_so_is_planned_again(tmp_path: Path) -> None:
    """The page committed with its audit entries (``append_together``): the refused
    commit wrote neither; each agent's entry is written once, with its rewrite."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    opts: dict[str, Any] = {"principal": "ops", "policy": POLICY, "witness": False}
    async with StateStore(url, keyring=KEYS, audit=Audit(), **opts) as store:
        await _populate(store)
        log = _refuse(store, 1)
        report = await migrate(store, apps.support_v2)
        assert log == ["refused"]
        assert report.changed == 3 and report.ok, report.failed
        audit = AuditLog(store.backend, KEYS)
        entries = [e async for e in audit.entries(operation="migrate") if e.agent_id]
        assert sorted(e.agent_id or "" for e in entries) == ["a0", "a1", "a2"]
        assert all(e.outcome == "ok" for e in entries)
        verified = await audit.verify()
        assert verified.ok and not verified.unapplied, verified


async def test_refused_on_every_try_the_agent_is_reported_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[int] = []

    async def pause(attempt: int) -> None:  # (counted, not slept: no timing)
        waits.append(attempt)

    monkeypatch.setattr(MIGRATE, "pause", pause, raising=False)
    async with StateStore(f"sqlite:///{tmp_path / 'b.db'}", snapshot_every=2) as store:
        await _populate(store)
        log = _refuse(store, None)
        report = await migrate(store, apps.support_v2)
        assert report.changed == 2 and not report.ok
        (failed,) = report.failed
        assert (failed.agent_id, failed.kind) == ("a1", "RewriteBelowPrunedBase")
        assert "'a1'" in failed.error and "seq 2" in failed.error
        assert len(log) == RETRIES  # the page's try, then one a retry
        assert waits == list(range(1, RETRIES))  # a pause after each refused retry
        assert await _versions(store) == {"a0": 2, "a1": 1, "a2": 2}  # a1 as it was


async def test_a_retry_after_a_moved_head_pauses_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent whose head moves before every rewrite (a live writer): 50 tries, a
    growing pause after each refused one, then reported."""
    waits: list[int] = []

    async def pause(attempt: int) -> None:
        waits.append(attempt)

    monkeypatch.setattr(MIGRATE, "pause", pause, raising=False)
    async with StateStore(f"sqlite:///{tmp_path / 'c.db'}", snapshot_every=2) as store:
        await _populate(store)
        backend = store.backend
        rewrite, many = backend.rewrite, backend.rewrite_many

        async def one(request: Any) -> Any:
            if request.agent_id == "a1":
                raise ConflictError("a1", request.expected_seq, request.expected_seq + 1)
            return await rewrite(request)

        async def page(requests: Any) -> Any:
            done = await many([r for r in requests if r.agent_id != "a1"])
            flags = iter(done)
            return [False if r.agent_id == "a1" else next(flags) for r in requests]

        backend.rewrite = one  # type: ignore[method-assign]
        backend.rewrite_many = page  # type: ignore[method-assign]
        report = await migrate(store, apps.support_v2)
        (failed,) = report.failed
        assert (failed.agent_id, failed.kind) == ("a1", "ConflictError")
        assert waits == list(range(1, RETRIES))
        assert await _versions(store) == {"a0": 2, "a1": 1, "a2": 2}


@pytest.mark.parametrize("step", ["rollback", "finalize"])
async def test_rollback_and_finalize_plan_a_refused_agent_again_on_its_own(
    step: str, tmp_path: Path
) -> None:
    """Rollback and finalize rewrite a page as the migration does: a page refused as
    planned before a prune is handed back, its agents read and rewritten one by one; an
    agent refused so again on its own retry is read and planned again (was: that second
    refusal escaped their per-agent retry, which caught ``ConflictError`` only, and
    stopped the whole rollback / finalize with the ConfigurationError)."""
    journal = tmp_path / "journal.json"
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", snapshot_every=2) as store:
        await _populate(store)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 3 and report.ok, report.failed
        log = _refuse(store, 2)  # the page, then a1's own retry
        if step == "rollback":
            back = await rollback(store, apps.support_v2, journal=journal)
            assert back.changed == 3 and back.failed == [], back.failed
            assert await _versions(store) == {"a0": 1, "a1": 1, "a2": 1}
        else:
            done = await finalize(store, apps.support_v2, journal=journal)
            assert done.released == 3 and done.failed == [], done.failed
            assert await _versions(store) == {"a0": 2, "a1": 2, "a2": 2}
        assert log == ["refused", "refused"]
