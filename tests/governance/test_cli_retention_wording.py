"""What ``statekeeper retention apply`` prints: past tense for what was done ("forgot",
"deleted", "placed a legal hold"), "would ..." in a dry run, and an action the engine
cannot make (``keys_ttl`` on Redis) said to be unsupported, not counted as done."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.governance import retention, retention_lock

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process, one_error_line


def test_keys_ttl_on_an_engine_that_cannot_expire_records_says_so(tmp_path: Path) -> None:
    with fresh_url("redis", tmp_path) as url:
        with SyncStateStore(url) as store:
            store.save("acme/a1", {"n": 1}, idempotency_key="step-1")
        run = cli_in_process("retention", "apply", "--db", url, "--rule", "* keys_ttl=30d")
        assert run.code == 0, str(run)
        assert "did forget" not in run.stdout and "forgot" not in run.stdout
        assert (
            "keys_ttl not supported by this engine: idempotency records expire with the"
            " agent's TTL" in run.stdout
        )
        assert "0 action(s)" in run.stdout and "1 unsupported" in run.stdout
        as_json = cli_in_process(
            "retention", "apply", "--db", url, "--rule", "* keys_ttl=30d", "--json"
        )
        assert [(a["action"], a["outcome"]) for a in json.loads(as_json.stdout)["actions"]] == [
            ("expire-keys", "unsupported")
        ]


def test_done_is_in_the_past_tense_and_a_dry_run_says_would(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with SyncStateStore(url) as store:
        store.save("acme/a1", {"n": 1}, idempotency_key="step-1")
        store.save("legal/y", {"n": 1})
    # written a year ago (by the store's clock: a purge checks its record's own time)
    with SyncStateStore(url, clock=lambda: time.time() - 365 * 86400) as store:
        store.save("old/x", {"n": 1})
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE sk_idempotency SET created_at = created_at - 365 * 86400")
        conn.commit()
    rules = ["--rule", "hold legal/*", "--rule", "old ttl=30d", "--rule", "acme keys_ttl=30d"]
    dry = cli_in_process("retention", "apply", "--db", url, *rules, "--dry-run")
    assert dry.code == 0, str(dry)
    assert "would place a legal hold on 'legal/*'" in dry.stdout
    assert "acme/a1: would forget 1 idempotency record(s)" in dry.stdout
    assert "old/x: would delete (1 events;" in dry.stdout
    assert "legal hold would place" not in dry.stdout
    done = cli_in_process("retention", "apply", "--db", url, *rules)
    assert done.code == 0, str(done)
    assert "placed a legal hold on 'legal/*'" in done.stdout
    assert "acme/a1: forgot 1 idempotency record(s)" in done.stdout
    assert "old/x: deleted (1 events;" in done.stdout
    assert "did " not in done.stdout


def test_a_bad_rule_is_named_by_its_place_among_the_rules(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as store:
        store.save("acme/a1", {"n": 1})
    first = cli_in_process("retention", "apply", "--db", url, "--rule", "acme keep_last=x")
    assert first.code == 2, str(first)
    assert "--rule:1:" in one_error_line(first) and "policy:2" not in first.stderr
    second = cli_in_process(
        "retention", "apply", "--db", url, "--rule", "acme keep_last=2", "--rule", "hold"
    )
    assert second.code == 2 and "--rule:2:" in one_error_line(second), str(second)


def test_a_failed_action_is_named_as_its_rule_s_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An action that failed was reported as a compaction, a TTL purge too ("old/x:
    could not remove 0 event(s) before seq 1, 0 snapshot(s)", ``"action": "compact"``),
    and counted among the actions made. Here every write fails: another connection
    holds the SQLite write lock for the whole run (from just after the run took its run
    lock, a write too, to just before it releases it)."""
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with SyncStateStore(url, clock=lambda: time.time() - 365 * 86400) as store:
        store.save("old/x", {"n": 1})  # written a year ago
    with SyncStateStore(url) as store:
        for n in range(3):
            store.save("new/y", {"n": n})
    busy = f"{url}?busy_timeout=0.2"
    rules = ["--rule", "old ttl=30d", "--rule", "new keep_last=1"]
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        locked = retention_lock.run_locked

        @contextlib.asynccontextmanager
        async def busy_while_locked(*args: Any) -> AsyncIterator[str]:
            async with locked(*args) as held:
                holder.execute("BEGIN IMMEDIATE")  # the write lock, for the whole run
                try:
                    yield held
                finally:
                    holder.execute("ROLLBACK")

        monkeypatch.setattr(retention, "run_locked", busy_while_locked)
        run = cli_in_process("retention", "apply", "--db", busy, *rules)
        as_json = cli_in_process("retention", "apply", "--db", busy, *rules, "--json")
    assert run.code == 1, str(run)
    lines = {line.split(":")[0]: line for line in run.stdout.splitlines() if ": " in line}
    assert lines["old/x"].startswith("old/x: could not delete (ttl) [failed: "), run.stdout
    assert lines["new/y"].startswith("new/y: could not compact [failed: "), run.stdout
    assert "write lock not obtained" in lines["old/x"]
    assert "2 agent(s) scanned, 0 on legal hold, 0 action(s), 2 failed" in run.stdout
    assert as_json.code == 1, str(as_json)
    actions = json.loads(as_json.stdout)["actions"]
    assert [(a["agent_id"], a["action"], a["outcome"]) for a in actions] == [
        ("new/y", "compact", "failed"),
        ("old/x", "purge", "failed"),
    ]
    with SyncStateStore(url) as store:  # nothing changed
        assert store.load("old/x").data == {"n": 1} and store.load("new/y").data == {"n": 2}
