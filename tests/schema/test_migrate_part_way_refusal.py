"""A migration's rewrite refused part-way by an engine rewriting one agent at a time
(S3: ``RewriteBelowPrunedBase`` with ``maybe_applied``, some of its records written
before a prune moved the base under it), its ``migrate`` entry written first.

``schema/applying.py`` took every refusal there for "nothing of it written" and voided
the entry as a plain conflict: the audit log said a conflict refused a rewrite whose
records partly stand. Now the void names the refusal (``error:RewriteBelowPrunedBase``)
and the agent's cached state is dropped; the agent is planned again and migrated, as
before. The engine's part-way refusal is made by wrapping a SQLite store's ``rewrite``
(the real rewrite applied, then the refusal raised), the store made to look like a
per-agent engine (no ``rewrite_many``, no rewrite committed with its entry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.governance import Audit, AuditLog
from statekeeper.records import RewriteRequest
from statekeeper.schema.applying import apply
from statekeeper.schema.migrate import migrate
from statekeeper.schema.rewrite import Rewrite

from . import apps
from .test_migrate_planned_before_prune import KEYS, POLICY, _populate, _versions


async def test_a_part_way_refusal_is_voided_naming_it_and_planned_again(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    opts: dict[str, Any] = {"principal": "ops", "policy": POLICY, "witness": False}
    async with StateStore(url, keyring=KEYS, audit=Audit(), **opts) as store:
        await _populate(store)
        backend: Any = store.backend
        backend.rewrites_many = False  # (one rewrite per agent, its entry first: S3's way)
        backend.changes_leases_and_rewrites = False
        real = backend.rewrite
        refused: list[str] = []

        async def part_way(request: Any) -> None:
            await real(request)  # (its records written: part-way, as far as they go)
            if request.agent_id == "a1" and not refused:
                refused.append("a1")
                exc = RewriteBelowPrunedBase("a1", 2, 3, "event")
                exc.maybe_applied = True  # type: ignore[attr-defined]
                raise exc

        backend.rewrite = part_way
        report = await migrate(store, apps.support_v2)
        assert refused == ["a1"]
        assert report.ok, report.failed
        assert await _versions(store) == {"a0": 2, "a1": 2, "a2": 2}
        audit = AuditLog(store.backend, KEYS)
        voids = [
            e.outcome
            async for e in audit.entries(operation="migrate")
            if e.agent_id == "a1" and e.outcome != "ok"
        ]
        assert voids == ["error:RewriteBelowPrunedBase"]  # was: error:ConflictError


async def test_a_part_way_refusal_of_one_rewrite_drops_the_cached_state(
    tmp_path: Path,
) -> None:
    """The same refusal met by :func:`~statekeeper.schema.applying.apply` (one rewrite:
    a migration's retry, a rollback's strip): the agent's cached state is dropped as
    :func:`~statekeeper.schema.applying.apply_page` drops it (the head record, written
    last, unchanged: the cache kept would be served over the snapshots rewritten).
    Was: kept."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    opts: dict[str, Any] = {"principal": "ops", "policy": POLICY, "witness": False}
    async with StateStore(url, keyring=KEYS, audit=Audit(), **opts) as store:
        await _populate(store)
        backend: Any = store.backend
        backend.changes_leases_and_rewrites = False  # (its entry first: S3's way)
        head = await backend.head_tag("a1")
        request = RewriteRequest("a1", head[0], head[1], (), (), head[1])

        async def part_way(request: Any) -> None:
            exc = RewriteBelowPrunedBase("a1", 2, 3, "event")
            exc.maybe_applied = True  # type: ignore[attr-defined]
            raise exc

        backend.rewrite = part_way
        await store.load("a1")
        reads: Any = getattr(store, "_reads")  # noqa: B009
        assert reads.cache.peek("a1") is not None
        with pytest.raises(RewriteBelowPrunedBase):
            await apply(store, Rewrite(request, b"link"))
        assert reads.cache.peek("a1") is None  # was: the cached state kept
