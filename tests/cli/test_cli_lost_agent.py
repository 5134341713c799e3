"""The CLI on a Redis store one of whose agents lost its data (its keys evicted or
deleted by hand while the store's marker stays: ``AgentLost``). ``statekeeper delete``
is the documented way to acknowledge the loss, so it must not fail on the loss itself.

The shared server, under each test's own key prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import SyncStateStore
from statekeeper.errors import AgentLost

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis
from ._proc import cli_env, run_in_process


@pytest.fixture
def lost(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, prefix) of a store with agents r/a (lost) and r/b."""
    require_redis()
    prefix = namespace(tmp_path, "sk_lostcli_") + ":"
    url = f"{REDIS_URL}?prefix={prefix}"
    try:
        with SyncStateStore(url) as store:
            store.save("r/a", {"n": 1})
            store.save("r/a", {"n": 2})
            store.save("r/b", {"n": 1})
        client = redis.Redis.from_url(REDIS_URL)
        try:
            assert client.delete(f"{prefix}a:r/a") == 1  # as `redis-cli DEL` does
        finally:
            client.close()
        yield url, prefix
    finally:
        delete_prefix(prefix)


def _sk(*args: str, input: str | None = None) -> tuple[int, str, str]:
    return run_in_process(args, cli_env(200), input=input)


def test_delete_of_a_lost_agent_acknowledges_the_loss(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("delete", "r/a", "--db", url, "--yes")
    assert code == 0, err  # main: 2, the AgentLost of the head read
    assert "'r/a'" in out and "lost" in out
    with SyncStateStore(url) as store:
        assert [i.agent_id for i in store.list_agents()] == ["r/b"]
        assert store.save("r/a", {"n": 1}).last_seq == 1  # its id can be used again
    code, out, err = _sk("delete", "r/a", "--db", url, "--yes")
    assert code == 0 and "(1 event(s))" in out  # the new r/a is deleted as usual
    code, _, err = _sk("delete", "r/a", "--db", url, "--yes")
    assert code == 1 and "not found" in err.lower()


def test_delete_of_a_lost_agent_asks_naming_the_loss(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("delete", "r/a", "--db", url, input="n\n")
    assert code == 1 and "not deleted" in err
    assert "'r/a'" in out and "acknowledge the loss" in out
    with SyncStateStore(url) as store, pytest.raises(AgentLost):  # declined: still lost
        store.load("r/a")


def test_verify_reports_a_lost_agent_and_checks_the_rest(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("verify", "--db", url, "--json")
    assert code == 1, err  # main: 2, the listing's AgentLost ended the check
    report = json.loads(out)
    assert report["agents"] == 2 and report["events"] == 1  # r/b checked
    assert [p["agent_id"] for p in report["problems"]] == ["r/a"]
    assert "lost its stored data" in report["problems"][0]["reason"]
    code, out, err = _sk("verify", "r/a", "r/b", "--db", url)  # named: the same
    assert code == 1, err
    assert "r/a" in out and "1 problem(s)" in out


def test_health_reports_a_lost_agent_as_unreadable(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("health", "--db", url, "--json")
    assert code == 1, err  # main: 2
    report = json.loads(out)
    assert report["agents"] == 1  # r/b
    assert [a for a, _ in report["unreadable"]] == ["r/a"]
    assert "lost its stored data" in report["unreadable"][0][1]
    assert "1 agent(s) could not be read" in report["breaches"]


def test_a_backup_stopped_by_a_lost_agent_says_how_to_proceed(
    lost: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = lost
    key = ["--backup-key", str(tmp_path / "b.key"), "--create-backup-key"]
    code, _, err = _sk("backup", "--db", url, "--to", str(tmp_path / "b.skb"), *key)
    assert code == 2  # still refused: a backup without r/a would skip it silently
    assert "'r/a'" in err and "lost its stored data" in err
    assert "`statekeeper delete r/a --yes` acknowledges it" in err  # main: not said
    assert "`statekeeper verify` lists every lost agent" in err
    assert not (tmp_path / "b.skb").exists()


def test_agents_lists_a_lost_agent_as_lost_and_the_rest(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("agents", "--db", url)
    assert code == 0, err  # main: 2, the listing's AgentLost ended the command
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("r/")}
    assert set(rows) == {"r/a", "r/b"}
    assert "(lost)" in rows["r/a"] and "(lost)" not in rows["r/b"]
    text = " ".join(out.split())
    assert "1 agent(s) lost their stored data ('r/a')" in text
    assert "`statekeeper delete r/a --yes` acknowledges" in text
    code, out, err = _sk("agents", "--db", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [(a["agent_id"], a["lost"]) for a in doc["agents"]] == [("r/a", True), ("r/b", False)]
    assert [x["agent_id"] for x in doc["lost"]] == ["r/a"]
    code, out, _ = _sk("agents", "--db", url, "--json", "-n", "1")  # paging past it
    page = json.loads(out)
    assert [a["agent_id"] for a in page["agents"]] == ["r/a"] and page["next_after"] == "r/a"
    code, out, _ = _sk("agents", "--db", url, "--json", "--after", "r/a")
    assert [a["agent_id"] for a in json.loads(out)["agents"]] == ["r/b"]


def test_stats_counts_a_lost_agent_and_the_rest(lost: tuple[str, str]) -> None:
    url, _ = lost
    code, out, err = _sk("stats", "--db", url, "--json")
    assert code == 0, err  # main: 2
    doc = json.loads(out)
    assert doc["agents"] == 2 and doc["events"] == 1  # r/b's one event
    assert doc["states"]["(lost)"] == 1
    assert [x["agent_id"] for x in doc["lost"]] == ["r/a"]
    assert doc["healthy"] is False  # main: true, beside the lost agent
    code, out, err = _sk("stats", "--db", url)
    assert code == 0, err
    text = " ".join(out.split())
    assert "1 agent(s) lost their stored data ('r/a')" in text
    assert "healthy no (1 agent(s) lost, below)" in text, text  # main: "healthy yes"


@pytest.mark.parametrize("dry_run", [True, False])
def test_retention_passes_over_a_lost_agent_and_reports_it(
    lost: tuple[str, str], dry_run: bool
) -> None:
    url, _ = lost
    with SyncStateStore(url) as store:
        store.save("r/b", {"n": 2})
        store.save("r/b", {"n": 3})  # r/b: 3 events, keep_last=1 compacts it
    dry = ["--dry-run"] if dry_run else []
    code, out, err = _sk(
        "retention", "apply", "--rule", "* keep_last=1", *dry, "--db", url, "--json"
    )
    assert code == 1, err  # a problem found, as verify's (main: 2, nothing done)
    report = json.loads(out)
    assert report["scanned"] == 2
    assert [x["agent_id"] for x in report["lost"]] == ["r/a"]
    assert [(a["agent_id"], a["action"]) for a in report["actions"]] == [("r/b", "compact")]
    code, out, err = _sk("retention", "apply", "--rule", "* keep_last=1", "--dry-run", "--db", url)
    assert code == 1, err
    text = " ".join(out.split())
    assert "1 agent(s) lost their stored data ('r/a')" in text and "1 lost" in text


def test_a_new_store_without_a_key_writes_past_a_lost_agent(lost: tuple[str, str]) -> None:
    url, _ = lost
    with SyncStateStore(url) as store:  # its first write samples heads (keyguard)
        assert store.save("r/b", {"n": 2}).last_seq == 2  # main: AgentLost of r/a
        assert store.save("r/new", {"n": 1}).last_seq == 1
