"""An export file altered after the export is refused by ``import``, nothing written.

The file holds the records decrypted, outside the store's chains: before the digest,
a byte changed in transit (here a durable step's recorded result) was imported,
"verified" against the file itself, and stored as the source's: the step would never
run again and return the altered result. The completion line now carries the SHA-256
of every line before it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore, SyncStateStore
from statekeeper.cli import app
from statekeeper.concurrency.steps import Steps


def _export(runner: CliRunner, tmp_path: Path) -> tuple[Path, str]:
    source = f"sqlite:///{tmp_path / 'source.db'}"

    async def record() -> None:
        async with StateStore(source) as store:
            await Steps(store, "order-42").run("charge", lambda: {"charged": 30})

    asyncio.run(record())
    exported = tmp_path / "orders.jsonl"
    done = runner.invoke(app, ["export", "--db", source, "-o", str(exported)])
    assert done.exit_code == 0, done.output
    target = f"sqlite:///{tmp_path / 'target.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    return exported, target


def test_a_byte_changed_in_transit_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    exported, target = _export(runner, tmp_path)
    data = exported.read_bytes()
    assert data.count(b'"charged":30') == 1
    altered = tmp_path / "altered.jsonl"
    altered.write_bytes(data.replace(b'"charged":30', b'"charged":80'))
    result = runner.invoke(app, ["import", str(altered), "--db", target])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "altered or damaged after the export; nothing was imported" in said
    listed = runner.invoke(app, ["agents", "--db", target, "--json"])
    assert json.loads(listed.stdout)["agents"] == []


def test_the_file_as_exported_imports_also_with_crlf_line_breaks(
    runner: CliRunner, tmp_path: Path
) -> None:
    exported, target = _export(runner, tmp_path)
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(exported.read_bytes().replace(b"\n", b"\r\n"))
    result = runner.invoke(app, ["import", str(crlf), "--db", target])
    assert result.exit_code == 0, result.output
    calls: list[int] = []
    with SyncStateStore(target) as store:
        assert store.load("order-42").seq == 2

    async def rerun() -> object:
        async with StateStore(target) as store:
            return await Steps(store, "order-42").run("charge", lambda: calls.append(1))

    assert asyncio.run(rerun()) == {"charged": 30}  # recorded: not run again
    assert calls == []


def test_an_export_without_a_digest_is_read_as_before(runner: CliRunner, tmp_path: Path) -> None:
    """A file written before the digest existed (its completion line has none)."""
    exported, target = _export(runner, tmp_path)
    lines = exported.read_bytes().splitlines()
    last = json.loads(lines[-1])
    assert set(last["complete"]) == {"agents", "events", "sha256"}
    del last["complete"]["sha256"]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"\n".join([*lines[:-1], json.dumps(last).encode()]) + b"\n")
    result = runner.invoke(app, ["import", str(old), "--db", target])
    assert result.exit_code == 0, result.output
