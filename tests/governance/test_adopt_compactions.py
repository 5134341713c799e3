"""Streams compacted before compactions were marked, adopted by the store's operator.

A version before the mark (store/compaction.py) compacted by ``keep_last`` left a base
snapshot without it: after the upgrade ``verify`` reported the history deleted and
``history``/``export`` raised ``IntegrityError``, with nothing to run but a smaller
keep_last. ``adopt_compactions`` (``statekeeper retention adopt-compactions``) checks
what can be checked of each such base and marks it, authenticated with the active key;
a stream whose events were deleted by hand is refused and still reported.

The old shape is written here directly as the old retention wrote it: the base is the
whole snapshot stored at seq 8 (snapshot_every=4), kept as it was, and ``prune`` removes
the events up to it and the snapshot at 4.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import IntegrityError, StateStore
from statekeeper.errors import ConfigurationError, HistoryCompacted
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.adoption import ADOPT_OP, adopt_compactions
from statekeeper.security import Keyring, generate_key

from ..backends._services import fresh_url
from ..store.test_tamper_history import _delete_history as delete_history

KEY = generate_key()
ENGINES = ["sqlite", "postgresql", "redis", "s3"]
#: where a hand edit leaves the snapshots below its base visible (S3: a base object hides
#: every commit below it, so the edit there is told apart only by an audit log)
VISIBLE_BELOW = ["sqlite", "postgresql", "redis"]
BASE = 8
POLICY = '[principals.ops]\nadmin = ["**"]\n'


def _keys() -> Keyring:
    return Keyring({"k1": KEY})


@contextmanager
def _url(engine: str, tmp_path: Path) -> Iterator[str]:
    with fresh_url(engine, tmp_path) as url:
        yield url


def _opened(url: str, **options: Any) -> StateStore:
    options.setdefault("keyring", _keys())
    return StateStore(url, snapshot_every=4, witness=False, cache_size=0, **options)


async def _old_compaction(store: StateStore, *agents: str) -> None:
    """10 events each, then what a keep_last=2 of a version before the mark did."""
    for agent in agents:
        for i in range(1, 11):
            await store.save(agent, {"owner": agent, "n": i})
    await store.flush()
    for agent in agents:
        await store.backend.prune(agent, BASE, [])


async def _stored_snapshot(store: StateStore, agent: str) -> bytes:
    raw = await store.backend.latest_snapshot(agent, BASE)
    assert raw is not None and raw.seq == BASE
    return raw.payload


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_old_compaction_is_refused_then_adopted(tmp_path: Path, engine: str) -> None:
    with _url(engine, tmp_path) as url:
        async with _opened(url) as store:
            await _old_compaction(store, "alpha", "beta")
        async with _opened(url) as store:
            # before: reported as deleted history, naming the command to run
            report = await store.verify()
            assert {(p.agent_id, p.seq) for p in report.problems} == {("alpha", 1), ("beta", 1)}
            assert all("retention adopt-compactions" in p.reason for p in report.problems)
            with pytest.raises(IntegrityError) as caught:
                [e async for e in store.history("alpha")]
            assert not isinstance(caught.value, HistoryCompacted)
            assert "adopt-compactions" in str(caught.value)
            # a dry run says what it would adopt and changes nothing
            stored = await _stored_snapshot(store, "alpha")
            dry = await adopt_compactions(store, dry_run=True)
            assert [(a.agent_id, a.base_seq, a.outcome) for a in dry.adoptions] == [
                ("alpha", BASE, "dry-run"),
                ("beta", BASE, "dry-run"),
            ]
            assert await _stored_snapshot(store, "alpha") == stored
            assert len((await store.verify()).problems) == 2
            # adopted: one agent named, then the rest
            done = await adopt_compactions(store, ["alpha"])
            assert [(a.agent_id, a.outcome) for a in done.adoptions] == [("alpha", "adopted")]
            done = await adopt_compactions(store)
            assert [(a.agent_id, a.outcome) for a in done.adoptions] == [("beta", "adopted")]
            assert done.marked_already == 1
            again = await adopt_compactions(store)  # idempotent: nothing left to do
            assert again.adoptions == [] and again.marked_already == 2
        async with _opened(url) as store:
            assert (await store.verify()).problems == []
            with pytest.raises(HistoryCompacted) as compacted:
                [e async for e in store.history("alpha")]
            assert compacted.value.base_seq == BASE
            assert [e.seq async for e in store.history("beta", after_seq=BASE)] == [9, 10]
            assert (await store.load("alpha")).data == {"owner": "alpha", "n": 10}
            await store.save("alpha", {"owner": "alpha", "n": 11})  # and it goes on
            assert (await store.verify()).problems == []


@pytest.mark.parametrize("engine", VISIBLE_BELOW)
async def test_history_deleted_by_hand_is_refused_and_still_reported(
    tmp_path: Path, engine: str
) -> None:
    """Events deleted by hand (test_tamper_history's edit: rows deleted, Redis's base
    field set), the snapshot at 4 left: retention's prune removed the snapshots below
    its base."""
    with _url(engine, tmp_path) as url:
        async with _opened(url) as store:
            for i in range(1, 11):
                await store.save("alpha", {"n": i})
        delete_history(engine, url)
        async with _opened(url) as store:
            done = await adopt_compactions(store)
            assert [(a.agent_id, a.outcome) for a in done.adoptions] == [("alpha", "refused")]
            assert "seq 4 below the base is still stored" in done.adoptions[0].reason
            problems = (await store.verify()).problems
            assert [(p.agent_id, p.seq, p.kind) for p in problems] == [("alpha", 1, "event")]
            with pytest.raises(IntegrityError) as caught:
                [e async for e in store.history("alpha")]
            assert not isinstance(caught.value, HistoryCompacted)


async def test_a_governed_store_adopts_only_what_its_audit_log_recorded(tmp_path: Path) -> None:
    """A store that keeps an audit log: the old retention recorded each compaction
    there; a stream its log does not record (its events and snapshots deleted by
    hand) is refused, and adopted only when asked on the operator's word."""
    url = f"sqlite:///{tmp_path / 'gov.db'}"
    gov = {"principal": "ops", "policy": parse_policy(POLICY), "audit": Audit()}
    async with _opened(url, **gov) as store:
        await _old_compaction(store, "acme/a", "acme/b")
        log = store._governance.audit  # type: ignore[attr-defined]
        # what the old retention run recorded: acme/a's compaction only
        await log.record(
            "compact", principal="ops", agent_id="acme/a", first_seq=1, last_seq=BASE,
            outcome="done", detail={"events_removed": BASE},
        )  # fmt: skip
    async with _opened(url, **gov) as store:
        done = await adopt_compactions(store)
        assert [(a.agent_id, a.outcome) for a in done.adoptions] == [
            ("acme/a", "adopted"),
            ("acme/b", "refused"),
        ]
        assert "audit log records no compaction" in done.adoptions[1].reason
        assert [p.agent_id for p in (await store.verify()).problems] == ["acme/b"]
        done = await adopt_compactions(store, ["acme/b"], unrecorded=True)
        assert [(a.agent_id, a.outcome) for a in done.adoptions] == [("acme/b", "adopted")]
        assert (await store.verify()).problems == []
        entries = [e async for e in store._governance.audit.entries(operation=ADOPT_OP)]  # type: ignore[attr-defined]
        assert [(e.agent_id, e.last_seq, e.outcome, e.detail["recorded"]) for e in entries] == [
            ("acme/a", BASE, "done", True),
            ("acme/b", BASE, "done", False),
        ]
        assert (await store._governance.audit.verify()).ok  # type: ignore[attr-defined]


async def test_refused_without_the_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'keyless.db'}"
    async with _opened(url, keyring=None) as store:
        await _old_compaction(store, "alpha")
        with pytest.raises(ConfigurationError, match="needs the store key"):
            await adopt_compactions(store)
        done = await adopt_compactions(store, keyless=True)  # (a store with no keys at all)
        assert [(a.agent_id, a.outcome) for a in done.adoptions] == [("alpha", "adopted")]
        assert (await store.verify()).problems == []


def test_cli_names_the_command_then_adopts(tmp_path: Path, monkeypatch: Any) -> None:
    import asyncio

    from statekeeper.cli import app

    db = tmp_path / "cli.db"

    async def build() -> None:
        async with _opened(f"sqlite:///{db}") as store:
            await _old_compaction(store, "alpha")

    asyncio.run(build())
    runner = CliRunner()
    monkeypatch.setenv("STATEKEEPER_KEYS", f"k1={KEY}")
    out = tmp_path / "out.jsonl"
    failed = runner.invoke(app, ["--db", str(db), "export", "-o", str(out)])
    assert failed.exit_code != 0 and "retention adopt-compactions" in failed.output
    monkeypatch.delenv("STATEKEEPER_KEYS")
    refused = runner.invoke(app, ["--db", str(db), "retention", "adopt-compactions"])
    assert refused.exit_code != 0 and "needs the store key" in refused.output
    monkeypatch.setenv("STATEKEEPER_KEYS", f"k1={KEY}")
    dry = runner.invoke(app, ["--db", str(db), "retention", "adopt-compactions", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would adopt the compaction to seq 8" in dry.output
    adopted = runner.invoke(app, ["--db", str(db), "retention", "adopt-compactions"])
    assert adopted.exit_code == 0, adopted.output
    assert "alpha: adopted the compaction to seq 8" in adopted.output
    assert runner.invoke(app, ["--db", str(db), "verify"]).exit_code == 0
    exported = runner.invoke(app, ["--db", str(db), "export", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    assert runner.invoke(app, ["--db", str(db), "history", "alpha"]).exit_code == 0
