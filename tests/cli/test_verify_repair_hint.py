"""``verify`` says a damaged snapshot does not stop loads and ``repair`` rebuilds it
only where that is true: a compacted agent's damaged base snapshot (retention
``keep_last``: the events before it are gone) stops every load of the agent and
``repair`` cannot rebuild it (there is nothing to replay), yet verify said "damaged
snapshots do not stop loads …; `statekeeper repair` rebuilds them" (repair then
exited 3, show with an integrity error)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

HINT = "`statekeeper repair` rebuilds them"


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    with SyncStateStore(url) as store:
        for n in range(6):
            store.save("a", {"n": n})
    return url


def _damage_snapshot(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as db:
        (payload,) = db.execute(
            "SELECT payload FROM sk_snapshots WHERE agent_id = 'a' AND seq = ?", (seq,)
        ).fetchone()
        damaged = bytes(payload[:-1]) + bytes([payload[-1] ^ 1])
        db.execute(
            "UPDATE sk_snapshots SET payload = ? WHERE agent_id = 'a' AND seq = ?",
            (damaged, seq),
        )


def test_no_rebuild_hint_for_a_damaged_compaction_base(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = _store(path)
    applied = runner.invoke(app, ["retention", "apply", "--db", url, "--rule", "* keep_last=2"])
    assert applied.exit_code == 0, applied.output
    _damage_snapshot(path, 4)  # the base: history up to it is gone
    verified = runner.invoke(app, ["verify", "--db", url])
    assert verified.exit_code == 1, verified.output
    assert HINT not in verified.output
    assert runner.invoke(app, ["repair", "--db", url, "--apply"]).exit_code == 3


def test_the_hint_stays_for_a_snapshot_repair_rebuilds(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with SyncStateStore(url, snapshot_every=3) as store:
        for n in range(6):
            store.save("a", {"n": n})
    (seq,) = sqlite3.connect(path).execute("SELECT max(seq) FROM sk_snapshots").fetchone()
    _damage_snapshot(path, seq)
    verified = runner.invoke(app, ["verify", "--db", url])
    assert verified.exit_code == 1, verified.output
    assert HINT in verified.output
    assert runner.invoke(app, ["repair", "--db", url, "--apply"]).exit_code == 0
