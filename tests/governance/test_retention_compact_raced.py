"""A ``keep_last`` compaction of an agent written since retention listed it — routine
while agents are active — was reported ``failed`` ("expected head seq ...": the prune
is conditional on the listed head), and one compacted past the plan by another
retention run meanwhile ``failed`` too ("history before seq N was compacted"), so
``retention apply`` exited 1 although nothing was lost (a purge in the same place is
``skipped``). Now such a compaction is planned again once on the head stored now, and
one that loses the race again is ``skipped`` (left to the next run); nothing removed
that was not planned on the stream as it is. The races are forced at named points
(the module's own steps), never by timing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance import retention as r
from statekeeper.governance import retention_idle as ri
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.retention_idle import check_unchanged, head_seen
from statekeeper.governance.retention_snapshots import snapshot_seqs
from statekeeper.store.feed import store_feed_bounds

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process
from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')
POLICY = RetentionPolicy.parse("acme keep_last=3\n")
ENGINES = ["memory", "sqlite", "postgresql", "redis", "tiered"]
GROWN_ENGINES = [*ENGINES, "s3"]


def _options(governed: bool) -> dict[str, Any]:
    if not governed:
        return {}
    return {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}


def _written_after_each_look(
    monkeypatch: pytest.MonkeyPatch, write: Callable[[], Awaitable[None]]
) -> None:
    """A writer after the last look before each prune (a plan's, and each made again on
    the stream grown since: :func:`~statekeeper.governance.retention_raced.on_grown`)."""

    async def looked(*args: Any) -> None:
        await check_unchanged(*args)
        await write()

    async def seen(*args: Any) -> Any:
        found = await head_seen(*args)
        await write()
        return found

    monkeypatch.setattr(r, "check_unchanged", looked)
    monkeypatch.setattr(ri, "head_seen", seen)


async def _audit_ok(store: StateStore) -> list[str]:
    """The outcomes of the log's compaction entries (an entry announced before a
    change that did not happen is followed by its void: ``error:...``)."""
    log = AuditLog(store.backend, KEYRING)
    verified = await log.verify()
    assert verified.ok, verified.problems
    assert not verified.unapplied, verified.unapplied
    return [e.outcome async for e in log.entries() if e.operation == "compact"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
@pytest.mark.parametrize("writes", ["once", "every-time"])
async def test_a_compaction_raced_by_a_writer_is_planned_again_or_skipped(
    tmp_path: Path, engine: str, governed: bool, writes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            written: list[int] = []

            async def write() -> None:  # the last look before the prune: then a writer
                if writes == "every-time" or not written:
                    for _ in range(3):
                        written.append(1)
                        await store.save("acme/b", {"i": 8 + len(written)})

            _written_after_each_look(monkeypatch, write)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            head = 9 + len(written)
            (action,) = report.actions
            if writes == "once":  # planned again on seq 12: compacted to 9
                assert (action.kind, action.outcome, action.base_seq) == ("compact", "done", 9)
                kept = list(range(10, head + 1))
            else:  # lost again: left to the next run, nothing removed
                assert (action.kind, action.outcome) == ("compact", "skipped"), action
                assert "written since it was listed" in action.reason
                assert "left to the next run" in action.reason
                kept = list(range(1, head + 1))
            assert (await store.load("acme/b")).data == {"i": head - 1}
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == kept
            if governed:
                audited = await _audit_ok(store)
                if writes == "once":  # the compaction made, last
                    assert audited[-1:] == ["done"], audited
                else:  # none, or each announced one voided
                    assert not audited or audited[-1].startswith("error"), audited
            again = await apply_retention(store, POLICY)  # the next run: what is left
            done = [] if writes == "once" else [("done", head - 3)]
            assert [(a.outcome, a.base_seq) for a in again.actions] == done
            assert (await store.load("acme/b")).data == {"i": head - 1}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_compaction_overlapping_another_run_is_not_failed(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A plans on seq 9 (target 6); meanwhile the agent is written to 12 and run B
    compacts it to 9: A's fold below B's base raised HistoryCompacted ("failed")."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            other: list[r.RetentionReport] = []

            async def other_run_first(*args: Any) -> Any:
                if not other:  # A planned its target: a writer, then run B
                    other.append(r.RetentionReport())
                    for i in range(9, 12):
                        await store.save("acme/b", {"i": i})
                    await apply_retention(store, POLICY, report=other[0])
                return await snapshot_seqs(*args)

            monkeypatch.setattr(r, "_snapshot_seqs", other_run_first)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            assert [(a.outcome, a.base_seq) for a in other[0].actions] == [("done", 9)]
            assert [a for a in report.actions if a.outcome == "failed"] == [], report.actions
            assert (await store.load("acme/b")).data == {"i": 11}
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [10, 11, 12]
            if governed:
                await _audit_ok(store)


def test_retention_apply_exits_0_when_a_compaction_lost_its_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"

    async def write() -> None:
        async with StateStore(url) as writer:  # another process, every time
            await writer.save("acme/b", {"i": "more"})

    with fresh_url("sqlite", tmp_path, "s.db"):
        with SyncStateStore(url) as store:
            for i in range(9):
                store.save("acme/b", {"i": i})
        _written_after_each_look(monkeypatch, write)
        run = cli_in_process("retention", "apply", "--db", url, "--rule", "acme keep_last=3")
        as_json = cli_in_process(
            "retention", "apply", "--db", url, "--rule", "acme keep_last=3", "--json"
        )
        monkeypatch.undo()
    assert run.code == 0, str(run)
    assert "acme/b: not compacted [skipped: written since it was listed" in run.stdout, run.stdout
    assert as_json.code == 0, str(as_json)
    actions = json.loads(as_json.stdout)["actions"]
    assert [(a["action"], a["outcome"]) for a in actions] == [("compact", "skipped")]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_skipped_compaction_reports_the_feed_floor_it_raised(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed's floor is raised before the prune (so a subscriber never reads past a
    removal): a compaction that then lost its race twice left the floor raised, its
    events all kept. Was: its ``skipped`` action said no floor (report.feed_through
    None), so ``retention apply`` neither said the floor rose nor named a projection
    behind it — whose next resume raised FeedPositionCompacted, no run having said so."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})

            async def write() -> None:
                for _ in range(3):
                    await store.save("acme/b", {"i": "more"})

            _written_after_each_look(monkeypatch, write)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            (action,) = report.actions
            assert (action.kind, action.outcome) == ("compact", "skipped"), action
            head = await store.backend.head("acme/b")
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == list(
                range(1, head + 1)
            )  # nothing removed from the stream
            floors = [floor for floor, _ in await store_feed_bounds(store)]
            assert max(floors) > 0  # the feed trimmed all the same (before the prune)
            assert report.feed_through is not None, action
            assert list(report.feed_through.positions) == floors


@pytest.mark.parametrize("engine", GROWN_ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_an_agent_written_during_every_plan_is_compacted(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent never idle is written while each plan reads and folds its stream (the
    long step): both plans lost their race, on every run — its ``keep_last`` never
    applied, each run saying only "skipped". The second plan's prune is made on the
    stream grown since (the record it planned on still there): compacted, more kept."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            written: list[int] = []

            async def written_while_planned(*args: Any) -> Any:
                written.append(1)  # (a writer while the plan reads the stream)
                await store.save("acme/b", {"i": 8 + len(written)})
                return await snapshot_seqs(*args)

            monkeypatch.setattr(r, "_snapshot_seqs", written_while_planned)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            (action,) = report.actions  # was: ("compact", "skipped"), nothing removed
            assert (action.kind, action.outcome, action.base_seq) == ("compact", "done", 7)
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [8, 9, 10, 11]
            assert (await store.load("acme/b")).data == {"i": 10}
            assert (await store.load("acme/b", at_seq=7)).data == {"i": 6}
            if governed:
                assert (await _audit_ok(store))[-1:] == ["done"]
            assert (await store.verify()).ok


@pytest.mark.parametrize("engine", GROWN_ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_stream_made_again_after_the_grown_look_is_not_compacted(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second plan's prune lost to a writer; the record it planned on was still at
    its head (the same stream, grown), then another process deleted the agent and wrote
    it again past that head before the head stored now was read. Was: the prune made at
    the new stream's head (its record read after the look) — the new stream's history
    up to the old plan's target removed, the old stream's state stored as its base
    (governed, one commit), or ``failed`` (plain: its base snapshot deleted with it)."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            written: list[int] = []
            remade: list[int] = []

            async def written_while_planned(*args: Any) -> Any:
                written.append(1)  # (a writer while the plan reads the stream)
                await store.save("acme/b", {"i": 8 + len(written)})
                return await snapshot_seqs(*args)

            async def looked(*args: Any) -> None:
                await check_unchanged(*args)
                if not remade:  # the grown look passed: deleted and written again
                    remade.append(1)
                    await store.delete("acme/b")
                    for i in range(14):
                        await store.save("acme/b", {"new": i})

            monkeypatch.setattr(r, "_snapshot_seqs", written_while_planned)
            monkeypatch.setattr(ri, "check_unchanged", looked)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            assert remade
            (action,) = report.actions
            assert (action.kind, action.outcome) == ("compact", "skipped"), action
            assert "left to the next run, nothing removed" in action.reason
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == list(
                range(1, 15)
            )  # the new stream: nothing removed
            assert (await store.load("acme/b")).data == {"new": 13}
            assert (await store.load("acme/b", at_seq=7)).data == {"new": 6}
            assert (await store.verify()).ok
            if governed:
                await _audit_ok(store)


@pytest.mark.parametrize("engine", GROWN_ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_compaction_by_another_run_after_the_grown_prune_is_not_growth(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second plan (head 10, target 7) lost its prune to a writer; before it is made
    again on the stream grown since, another retention run compacts the agent to 9 —
    below the head planned on, so the record there is still in place, but it is not
    the stream the plan was made on only grown. Was: the prune made again all the same
    — ``failed`` (plain: "no snapshot at seq 7", the other run removed it; ``retention
    apply`` exit 1) or, governed, a ``done`` compaction to base 7 recorded and reported
    under the other run's base 9 (its 7 events counted removed twice)."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            written: list[int] = []
            other: list[r.RetentionReport] = []

            async def write() -> None:
                written.append(1)
                await store.save("acme/b", {"i": 8 + len(written)})

            async def written_while_planned(*args: Any) -> Any:
                await write()  # (a writer while the plan reads the stream)
                return await snapshot_seqs(*args)

            async def then_another_run(*args: Any) -> Any:
                if not other:  # the grown prune's first look: written, then run B
                    await write()
                    monkeypatch.setattr(r, "_snapshot_seqs", snapshot_seqs)
                    other.append(await apply_retention(store, POLICY))
                return await head_seen(*args)

            monkeypatch.setattr(r, "_snapshot_seqs", written_while_planned)
            monkeypatch.setattr(ri, "head_seen", then_another_run)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            assert [(a.outcome, a.base_seq) for a in other[0].actions] == [("done", 9)]
            (action,) = report.actions
            assert (action.kind, action.outcome) == ("compact", "skipped"), action
            assert "left to the next run, nothing removed" in action.reason
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [10, 11, 12]
            assert (await store.load("acme/b")).data == {"i": 11}
            assert (await store.load("acme/b", at_seq=9)).data == {"i": 8}
            assert (await store.verify()).ok
            if governed:
                audited = await _audit_ok(store)  # run B's made, each of ours voided
                voided = [e for e in audited if e.startswith("error")]
                assert audited.count("done") - len(voided) == 1, audited
            assert (await apply_retention(store, POLICY)).actions == []


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_two_runs_compacting_to_the_same_base_report_it_once(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two concurrent runs, one policy: run A plans acme/b on seq 9 (target 6) and folds
    its new base; run B then compacts the agent to the same base 6. Was: A made its
    prune all the same (removing nothing: B had) and reported "done, 6 events removed"
    too — each run said it removed the same events (``retention apply`` run twice at
    once: some agents in both outputs). Now A sees the base moved before its change and
    plans again on the stream as it is: nothing left to do, no action of A's."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **_options(governed)) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})
            other: list[r.RetentionReport] = []
            fold = r._full_snapshot_at

            async def other_run_after_the_fold(*args: Any) -> Any:
                full = await fold(*args)
                if not other:  # A folded its base: run B compacts the agent first
                    other.append(r.RetentionReport())
                    await apply_retention(store, POLICY, report=other[0])
                return full

            monkeypatch.setattr(r, "_full_snapshot_at", other_run_after_the_fold)
            report = await apply_retention(store, POLICY)
            monkeypatch.undo()
            assert [(a.outcome, a.base_seq, a.events_removed) for a in other[0].actions] == [
                ("done", 6, 6)
            ]
            assert report.actions == [], report.actions
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [7, 8, 9]
            assert (await store.load("acme/b")).data == {"i": 8}
            if governed:
                assert await _audit_ok(store) == ["done"]  # one compaction, B's
