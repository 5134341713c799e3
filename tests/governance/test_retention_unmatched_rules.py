"""A retention rule that governs no agent (an agent id where a namespace belongs, a
namespace misspelt) is reported, not passed over in silence: ``unmatched_rules`` of the
run's report and of ``--json``, a warning line of ``retention apply`` naming the rule
(and the agent it names), and exit code 1 when no rule governed anything."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper import StateStore, SyncStateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..cli._subprocess import cli_in_process


async def test_each_rule_that_governed_no_agent_is_reported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as store:
        for agent_id in ("a0001", "acme/alice", "legal/bob"):
            for i in range(3):
                await store.save(agent_id, {"i": i})
        policy = RetentionPolicy.parse(
            "a0001 keep_last=1\nalice keep_last=1\nacmee ttl=1d\nacme keep_last=2\n"
            "legal keep_last=1\nhold legal/*\n* snapshot_every=5"
        )
        report = await apply_retention(store, policy, dry_run=True)
        # "legal" governed its (held) agent: a rule, not a typo; "*" is never listed
        assert report.unmatched_rules == {"a0001": "a0001", "alice": "acme/alice", "acmee": ""}
        # a run resumed part-way saw only part of the store: it names none
        resumed = await apply_retention(store, policy, dry_run=True, after="a0001")
        assert resumed.unmatched_rules == {}
    # a view of a namespace: only the rules that could govern its agents are checked
    async with StateStore(url, namespace="acme") as acme:
        report = await apply_retention(acme, policy, dry_run=True)
        assert report.unmatched_rules == {}


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as store:
        for i in range(3):
            store.save("a0001", {"i": i})
            store.save("acme/alice", {"i": i})
    return url


def test_a_rule_naming_an_agent_warns_and_exits_1_when_nothing_was_governed(
    tmp_path: Path,
) -> None:
    url = _store(tmp_path)
    for dry in ((), ("--dry-run",)):
        run = cli_in_process("retention", "apply", "--db", url, "--rule", "a0001 keep_last=1", *dry)
        assert run.code == 1, str(run)
        assert (
            "warning: rule 'a0001' governed no agent: no agent is in namespace 'a0001';"
            " 'a0001' is an agent, and rules name namespaces: hold it ('hold a0001')"
        ) in run.stderr, str(run)
    run = cli_in_process("retention", "apply", "--db", url, "--rule", "alice keep_last=1")
    assert run.code == 1, str(run)
    assert "'alice' names the agent 'acme/alice'" in run.stderr, str(run)
    assert "write the rule for its namespace 'acme'" in run.stderr, str(run)
    with SyncStateStore(url) as store:  # nothing was applied
        assert [e.seq for e in store.history("a0001")] == [1, 2, 3]


def test_a_misspelt_namespace_warns_and_the_other_rules_still_work(tmp_path: Path) -> None:
    url = _store(tmp_path)
    rules = ("--rule", "acmee keep_last=1", "--rule", "acme keep_last=1")
    run = cli_in_process("retention", "apply", "--db", url, *rules, "--json")
    assert run.code == 0, str(run)
    out = json.loads(run.stdout)
    assert out["unmatched_rules"] == [{"namespace": "acmee", "agent_id": None}]
    assert [a["agent_id"] for a in out["actions"]] == ["acme/alice"]
    assert "warning: rule 'acmee' governed no agent" in run.stderr, str(run)
    # with a '*' rule every agent is governed by some rule: a warning, exit 0
    run = cli_in_process(
        "retention", "apply", "--db", url, "--rule", "acmee ttl=1d", "--rule", "* keep_last=2"
    )
    assert run.code == 0, str(run)
    assert "warning: rule 'acmee' governed no agent" in run.stderr, str(run)
    # an empty store: nothing to govern, nothing lost (a warning, exit 0)
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with SyncStateStore(empty):
        pass
    run = cli_in_process("retention", "apply", "--db", empty, "--rule", "acme keep_last=1")
    assert run.code == 0, str(run)
    assert "warning: rule 'acme' governed no agent" in run.stderr, str(run)
