"""``audit verify`` sees a purge that passed a legal hold the log says was in force.

Every purge reads the store's holds stream, so deleting that stream (its rows, with
write access to the database, as one deletes the audit log) released every hold
silently: retention then purged the held agents, each purge with its entries, and
``audit verify`` said ok although the log recorded the hold and no release. A purge
(delete, retention purge, forget...) of an agent a hold in force by the log covers is
now a problem."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold, remove_hold
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from .conftest import KEYRING

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


def _open(url: str) -> StateStore:
    return StateStore(url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit())


async def _purge_all(url: str) -> list[str]:
    async with _open(url) as store:
        report = await apply_retention(
            store, RetentionPolicy.parse("* ttl=1s"), now=store.clock() + 3600
        )
        return sorted(a.agent_id for a in report.actions if a.outcome == "done")


async def _verify(url: str) -> list[str]:
    async with StateStore(url, keyring=KEYRING) as store:
        report = await AuditLog(store.backend, KEYRING).verify()
        assert report.ok == (not report.problems)
        return report.problems


async def test_a_purge_after_the_holds_were_deleted_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    async with _open(url) as store:
        for agent in ("acme/alice", "acme/bob", "legal/case-7"):
            await store.save(agent, {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
        await add_hold(store, "legal/*", "regulator inquiry")
    assert await _verify(url) == []
    # someone with write access to the file deletes the holds stream and the store's
    # mark of keeping holds (alone, the stream's absence makes every purge fail)
    with sqlite3.connect(path) as db:
        for table in ("sk_events", "sk_snapshots", "sk_agents"):
            db.execute(f"DELETE FROM {table} WHERE agent_id = char(1) || 'sk-holds/registry'")
        db.execute("DELETE FROM sk_meta WHERE key = 'marker:legal-holds'")
    assert await _purge_all(url) == ["acme/alice", "acme/bob", "legal/case-7"]
    problems = await _verify(url)
    assert len(problems) == 2, problems
    assert problems[0].startswith("'acme/alice': purge (entry ")
    assert "while the legal hold 'acme/alice' (entry 4) was in force" in problems[0]
    assert problems[1].startswith("'legal/case-7': purge (entry ")
    assert "the legal hold 'legal/*' (entry 5)" in problems[1]


async def test_a_purge_after_a_release_is_not_a_problem(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with _open(url) as store:
        for agent in ("acme/alice", "legal/case-7", "legal/sub/x"):
            await store.save(agent, {"n": 1})
        await add_hold(store, "acme/alice", "Smith v. Acme")
        await add_hold(store, "legal/*", "regulator inquiry")
    # held: retention passes over them (legal/sub/x is below legal/*: not covered)
    assert await _purge_all(url) == ["legal/sub/x"]
    async with _open(url) as store:
        await remove_hold(store, "acme/alice", "settled")
        await remove_hold(store, "legal/*", "closed")
        await add_hold(store, "acme/alice", "appeal")  # placed again ...
        await remove_hold(store, "acme/alice", "appeal lost")  # ... and released again
    assert await _purge_all(url) == ["acme/alice", "legal/case-7"]
    assert await _verify(url) == []
