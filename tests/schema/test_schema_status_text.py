"""``statekeeper schema status`` prints what docs/cli.md says it shows: the stored
agents of a model per schema version and those that would not load, not a migration's
heading, counts and sample diff."""

from __future__ import annotations

from pathlib import Path

from ..cli._subprocess import cli_in_process
from .test_migrate_cli import _populate


def test_schema_status_shows_stored_agents_per_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _populate(url, 3, bad=True)
    run = cli_in_process("--db", url, "schema", "status", "--app", "tests.schema.apps:v2")
    assert run.code == 0, str(run)
    out = run.stdout
    for migrate_like in ("would migrate", "sample", "dry run", "migrate support to"):
        assert migrate_like not in out, out
    assert "support: 4 stored agent(s) by schema version (current: 2)" in out, out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("v1"))
    assert row.split()[:2] == ["v1", "4"], row
    assert "1 agent(s) would not load at version 2" in out and "'bad'" in out, out
