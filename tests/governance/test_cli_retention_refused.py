"""``retention apply`` run by a principal who may not purge: each refusal printed
with its reason (access denied, what is needed), a TTL delete called a delete (not a
compaction), and the exit code of access denied (4)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper import SyncStateStore

from ..cli._subprocess import cli_in_process

_POLICY = """[roles.support]
read = ["acme/**"]
write = ["acme/support/**"]
[principals.support-bot]
roles = ["support"]
"""


def _store(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        for agent in ("acme/billing/inv-7", "acme/support/t-1"):
            for n in range(3):
                store.save(agent, {"n": n})
    with closing(sqlite3.connect(path)) as conn:  # written a year ago
        conn.execute("UPDATE sk_agents SET updated_at = updated_at - 365 * 86400")
        conn.commit()
    policy = tmp_path / "policy.toml"
    policy.write_text(_POLICY)
    return f"sqlite:///{path}", policy


def test_a_refused_ttl_delete_says_access_denied_and_exits_4(tmp_path: Path) -> None:
    url, policy = _store(tmp_path)
    args = ("--as", "support-bot", "--policy", str(policy), "retention", "apply", "--db", url)
    run = cli_in_process(*args, "--rule", "* ttl=30d")
    assert run.code == 4, str(run)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("acme/billing/inv-7:")]
    assert len(lines) == 1, str(run)
    line = lines[0]
    assert "not deleted" in line and "access denied" in line, line
    assert "needs admin on namespace 'acme/billing'" in line, line
    assert "remove" not in line and "compact" not in line and "before seq" not in line, line
    assert "2 refused (access denied)" in run.stdout, str(run)
    as_json = cli_in_process(*args, "--rule", "* ttl=30d", "--json")
    assert as_json.code == 4, str(as_json)
    actions = json.loads(as_json.stdout)["actions"]
    assert {(a["action"], a["outcome"]) for a in actions} == {("purge", "refused")}
    with SyncStateStore(url) as store:  # nothing was deleted
        assert store.head("acme/billing/inv-7") == 3


def test_a_refused_compaction_is_called_one(tmp_path: Path) -> None:
    url, policy = _store(tmp_path)
    args = ("--as", "support-bot", "--policy", str(policy), "retention", "apply", "--db", url)
    run = cli_in_process(*args, "--rule", "* keep_last=1")
    assert run.code == 4, str(run)
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("acme/support/t-1:"))
    assert "not compacted" in line and "needs admin on namespace 'acme/support'" in line, line
