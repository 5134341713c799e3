"""Retention: TTL, keep-last-N compaction, snapshot thinning, legal hold, dry run,
resume, audit events; verify stays clean on every engine that can prune."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Capability
from statekeeper.errors import AgentNotFound, HistoryCompacted, RetentionPolicyError
from statekeeper.governance.hooks import GovernanceEvent
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

POLICY = RetentionPolicy.parse(
    """
    # default: compact to the last 3 events, snapshots at multiples of 5
    *      keep_last=3 snapshot_every=5
    stale  ttl=1h                 # whole agents, one hour after their last write
    hold   acme/litigation
    hold   legal/*
    """
)
T0 = 1_000_000.0


async def fill(store: StateStore, agent_ids: list[str], events: int = 12) -> None:
    for agent_id in agent_ids:
        for i in range(events):
            await store.save(agent_id, {"i": i, "agent": agent_id})


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_compaction_ttl_and_holds_leave_verify_clean(tmp_path: Path, engine: str) -> None:
    agents = ["acme/a", "acme/litigation", "legal/b", "stale/c", "plain"]
    events: list[GovernanceEvent] = []
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, snapshot_every=2, clock=lambda: T0) as store:
            await fill(store, agents)
            dry = await apply_retention(store, POLICY, dry_run=True, now=T0 + 7200)
            assert {(a.agent_id, a.kind) for a in dry.actions} == {
                ("acme/a", "compact"),
                ("stale/c", "purge"),
                ("plain", "compact"),
            }
            assert all(a.outcome == "dry-run" for a in dry.actions)
            assert len(await store.backend.read("acme/a")) == 12  # nothing changed
            report = await apply_retention(store, POLICY, now=T0 + 7200, audit=events.append)
            assert report.held == 2 and report.purged == 1
            compact = next(a for a in report.actions if a.agent_id == "acme/a")
            assert (compact.base_seq, compact.events_removed) == (9, 9)
            assert [e.seq for e in await store.backend.read("acme/a")] == [10, 11, 12]
            snaps = []
            below = None
            while (raw := await store.backend.latest_snapshot("acme/a", below)) is not None:
                snaps.append(raw.seq)
                below = raw.seq - 1
            assert sorted(snaps) == [9, 10, 12]  # base, multiple of 5, latest
            assert (await store.load("acme/a")).data == {"i": 11, "agent": "acme/a"}
            assert (await store.load("acme/a", at_seq=9)).data["i"] == 8
            with pytest.raises(HistoryCompacted) as caught:
                await store.load("acme/a", at_seq=4)
            assert caught.value.base_seq == 9
            with pytest.raises(AgentNotFound):
                await store.load("stale/c")
            for held in ("acme/litigation", "legal/b"):
                assert len(await store.backend.read(held)) == 12  # exempt from every purge
            report_v = await store.verify()
            assert report_v.ok, report_v.problems
            # a second run finds nothing more to do
            again = await apply_retention(store, POLICY, now=T0 + 7200)
            assert again.actions == []
            # the compacted stream goes on, and verifies from its base
            await store.save("acme/a", {"i": 99})
            assert (await store.verify(["acme/a"])).ok
    assert {(e.op, e.agent_id) for e in events} == {
        ("hold", "acme/litigation"),  # the policy's hold lines, placed in the store
        ("hold", None),  # legal/* (a namespace: no one agent)
        ("compact", "acme/a"),
        ("purge", "stale/c"),
        ("compact", "plain"),
    }


async def test_the_history_of_a_compacted_agent_says_so_and_goes_on_from_its_base(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from statekeeper.cli import app

    url = f"sqlite:///{tmp_path / 'kept.db'}"
    async with StateStore(url, snapshot_every=2, clock=lambda: T0) as store:
        await fill(store, ["acme/a"])
        await apply_retention(store, POLICY, now=T0)
        # not a damaged stream ("gap"): the history before the base was removed on purpose
        with pytest.raises(HistoryCompacted) as caught:
            _ = [ev async for ev in store.history("acme/a")]
        assert caught.value.base_seq == 9
        with pytest.raises(HistoryCompacted):
            _ = [ev async for ev in store.history("acme/a", after_seq=4)]
        assert [ev.seq async for ev in store.history("acme/a", after_seq=9)] == [10, 11, 12]
        # a bounded range wholly before the base too (was: no events, as if never written)
        for after, to in ((2, 3), (8, 9), (0, 9)):
            with pytest.raises(HistoryCompacted) as caught:
                _ = [ev async for ev in store.history("acme/a", after_seq=after, to_seq=to)]
            assert caught.value.base_seq == 9, (after, to)
        assert [ev.seq async for ev in store.history("acme/a", after_seq=9, to_seq=10)] == [10]
        assert [ev async for ev in store.history("acme/a", after_seq=12, to_seq=20)] == []
        assert [ev async for ev in store.history("nobody", after_seq=2, to_seq=3)] == []
    runner = CliRunner()
    shown = runner.invoke(app, ["history", "acme/a", "--db", url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert [json.loads(line)["seq"] for line in shown.output.splitlines()] == [10, 11, 12]
    table = runner.invoke(app, ["history", "acme/a", "--db", url])
    assert table.exit_code == 0, table.output
    assert "compacted by retention" in table.output and "seq 10–12 of 12" in table.output
    for args in (["tail", "acme/a"], ["tail"]):
        tail = runner.invoke(app, [*args, "--db", url])
        assert tail.exit_code == 0, tail.output
        assert "#12" in tail.output and "#10" in tail.output


async def test_a_run_resumes_after_the_last_agent_done(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", snapshot_every=4) as store:
        await fill(store, [f"n/{i}" for i in range(6)], events=8)
        seen: list[str] = []

        class Stop(Exception):
            pass

        def progress(agent_id: str, scanned: int) -> None:
            seen.append(agent_id)
            if scanned == 3:
                raise Stop  # interrupted (a crash, ^C) after three agents

        with pytest.raises(Stop):
            await apply_retention(store, POLICY, progress=progress)
        assert len(await store.backend.read("n/0")) == 3
        assert len(await store.backend.read("n/3")) == 8
        rest = await apply_retention(store, POLICY, after=seen[-1])
        assert rest.scanned == 3 and {a.agent_id for a in rest.actions} == {"n/3", "n/4", "n/5"}
        assert (await store.verify()).ok


async def test_engines_without_prune_report_it_and_still_apply_ttl(tmp_path: Path) -> None:
    from statekeeper.backends.memory import MemoryBackend

    class NoPrune(MemoryBackend):
        capabilities = MemoryBackend.capabilities - {Capability.PRUNE}

    async with StateStore(NoPrune(), clock=lambda: T0) as store:
        await fill(store, ["acme/a", "stale/c"], events=6)
        report = await apply_retention(store, POLICY, now=T0 + 7200)
        outcomes = {(a.agent_id, a.kind, a.outcome) for a in report.actions}
        assert outcomes == {("acme/a", "compact", "unsupported"), ("stale/c", "purge", "done")}
        assert len(await store.backend.read("acme/a")) == 6


def test_the_namespace_is_the_part_before_the_last_slash() -> None:
    policy = RetentionPolicy.parse("acme/eu keep_last=1\nacme keep_last=2\nhold acme/eu/*\n")
    assert policy.rule_for("acme/eu/bob") == policy.rules[0]
    assert policy.rule_for("acme/bob") == policy.rules[1]
    assert policy.rule_for("bob") is None
    assert policy.held("acme/eu/bob") and not policy.held("acme/bob")


async def test_audit_events_reach_an_audit_log() -> None:
    from statekeeper.governance.hooks import to_audit_log

    class Log:
        def __init__(self) -> None:
            self.rows: list[tuple[object, ...]] = []

        async def record(self, op: str, **kw: object) -> int:
            self.rows.append((op, kw["principal"], kw["agent_id"], kw["outcome"]))
            return len(self.rows)

    log = Log()
    async with StateStore("memory://", clock=lambda: T0) as store:
        await fill(store, ["stale/x"], events=2)
        await apply_retention(store, POLICY, now=T0 + 7200, audit=to_audit_log(log, "ops"))
    assert log.rows == [  # the policy's hold lines placed first, then the purge
        ("hold", "ops", "acme/litigation", "ok"),
        ("hold", "ops", None, "ok"),
        ("purge", "ops", "stale/x", "done"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("* keep_last=3\nacme keep_last=0\n", 2, "keep_last"),
        ("acme ttl=soon\n", 1, "ttl"),
        ("# comment\n\nacme bogus=1\n", 3, "unknown setting"),
        ("acme ttl=1d\nacme keep_last=2\n", 2, "already"),
        ("acme\n", 1, "sets nothing"),
        ("hold\n", 1, "hold"),
        ("/b keep_last=1\n", 1, "namespace"),
    ],
)
def test_a_malformed_policy_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(RetentionPolicyError) as caught:
        RetentionPolicy.parse(text, "retention.policy")
    assert caught.value.line == line
    assert f"retention.policy:{line}:" in str(caught.value) and words in str(caught.value)
