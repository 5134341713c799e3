"""``statekeeper retention apply`` with a ``keys_ttl`` rule: old idempotency records
are counted by ``--dry-run`` (nothing forgotten) and forgotten by a run, shown as
``expire-keys`` actions (``keys_expired`` in ``--json``); a held agent keeps its own."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper import SyncStateStore

from ..cli._subprocess import cli_in_process


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    store = SyncStateStore(url)
    try:
        for agent in ("acme/a1", "acme/a2", "legal/a3"):
            store.save(agent, {"n": 1}, idempotency_key="step-1")
            store.save(agent, {"n": 2}, idempotency_key="step-2")
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as conn:  # acme/a1's records: a year old
        conn.execute("UPDATE sk_idempotency SET created_at = created_at - 365 * 86400")
        conn.execute(
            "UPDATE sk_idempotency SET created_at = created_at + 365 * 86400"
            " WHERE agent_id = 'acme/a2' AND key = 'step-2'"
        )
        conn.commit()
    return url


def _records(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT agent_id, count(*) FROM sk_idempotency GROUP BY agent_id"
        ).fetchall()
    return dict(rows)


def test_retention_apply_expires_old_records(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = _store(path)
    rules = ("--rule", "* keys_ttl=30d", "--rule", "hold legal/*")
    dry = cli_in_process("retention", "apply", "--db", url, *rules, "--dry-run", "--json")
    assert dry.code == 0, str(dry)
    out = json.loads(dry.stdout)
    assert [
        (a["agent_id"], a["action"], a["outcome"], a["keys_expired"]) for a in out["actions"]
    ] == [
        ("acme/a1", "expire-keys", "dry-run", 2),
        ("acme/a2", "expire-keys", "dry-run", 1),
    ]
    assert out["held"] == 1
    assert _records(path) == {"acme/a1": 2, "acme/a2": 2, "legal/a3": 2}
    run = cli_in_process("retention", "apply", "--db", url, *rules)
    assert run.code == 0, str(run)
    assert "acme/a1: forgot 2 idempotency record(s) (made more than 30d ago)" in run.stdout
    assert _records(path) == {"acme/a2": 1, "legal/a3": 2}
