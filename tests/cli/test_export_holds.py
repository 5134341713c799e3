"""``export`` carries the legal holds on what it exports, ``import`` places them first.

Before, an export held the agents only: a store moved by export/import (the way
across engines and keys) arrived with every agent unheld, and the target's next
``retention apply``, ``delete`` or ``forget`` destroyed what a court asked to keep,
with nothing said anywhere."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.governance.holds import add_hold


def _source(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'source.db'}"

    async def fill() -> None:
        async with StateStore(url) as store:
            for agent in ("acme/alice", "acme/bob", "acme/eu/carol", "beta/dan"):
                await store.save(agent, {"email": f"{agent}@example.com"})
            await add_hold(store, "acme/alice", "Smith v. Acme")
            await add_hold(store, "acme/*", "regulator inquiry")
            await add_hold(store, "legal/*", "no agent yet")

    asyncio.run(fill())
    return url


def _target(runner: CliRunner, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    assert runner.invoke(app, ["init", url]).exit_code == 0
    return url


def _holds(runner: CliRunner, url: str) -> dict[str, str]:
    listed = runner.invoke(app, ["hold", "list", "--db", url, "--json"])
    assert listed.exit_code == 0, listed.output
    return {h["pattern"]: h["reason"] for h in json.loads(listed.stdout)}


def test_a_moved_store_keeps_its_holds(runner: CliRunner, tmp_path: Path) -> None:
    source, target = _source(tmp_path), _target(runner, tmp_path)
    file = tmp_path / "all.jsonl"
    assert runner.invoke(app, ["export", "--db", source, "-o", str(file)]).exit_code == 0
    imported = runner.invoke(app, ["import", str(file), "--db", target, "--json"])
    assert imported.exit_code == 0, imported.output
    assert sorted(json.loads(imported.stdout)["holds_placed"]) == [
        "acme/*",
        "acme/alice",
        "legal/*",
    ]
    assert _holds(runner, target) == _holds(runner, source)
    refused = runner.invoke(app, ["delete", "acme/bob", "--yes", "--db", target])
    assert refused.exit_code == 4, refused.output  # held by acme/*
    # the same file again: the holds are there, nothing placed twice
    again = runner.invoke(app, ["import", str(file), "--db", target, "--skip-existing", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["holds_placed"] == []


def test_named_agents_carry_the_holds_covering_them(runner: CliRunner, tmp_path: Path) -> None:
    source, target = _source(tmp_path), _target(runner, tmp_path)
    file = tmp_path / "some.jsonl"
    exported = runner.invoke(
        app, ["export", "acme/bob", "beta/dan", "--db", source, "-o", str(file)]
    )
    assert exported.exit_code == 0, exported.output
    assert runner.invoke(app, ["import", str(file), "--db", target]).exit_code == 0
    assert _holds(runner, target) == {"acme/*": "regulator inquiry"}


def test_a_namespace_moves_with_its_holds(runner: CliRunner, tmp_path: Path) -> None:
    """Relative to the namespace in the file; a hold on the namespace itself (no name
    there) is written for each agent it covers."""
    source, target = _source(tmp_path), _target(runner, tmp_path)
    file = tmp_path / "acme.jsonl"
    out = runner.invoke(app, ["--namespace", "acme", "export", "--db", source, "-o", str(file)])
    assert out.exit_code == 0, out.output
    held = [json.loads(x) for x in file.read_text().splitlines() if '"hold"' in x]
    assert sorted(h["hold"] for h in held) == ["alice", "bob"]  # acme/eu/carol: not acme/*
    moved = runner.invoke(app, ["--namespace", "other", "import", str(file), "--db", target])
    assert moved.exit_code == 0, moved.output
    assert _holds(runner, target) == {
        "other/alice": "Smith v. Acme",
        "other/bob": "regulator inquiry",
    }


def test_a_bad_hold_line_is_refused_before_anything_is_written(
    runner: CliRunner, tmp_path: Path
) -> None:
    source, target = _source(tmp_path), _target(runner, tmp_path)
    file = tmp_path / "all.jsonl"
    assert runner.invoke(app, ["export", "--db", source, "-o", str(file)]).exit_code == 0
    lines = [json.loads(x) for x in file.read_text().splitlines()]
    del lines[-1]["complete"]["sha256"]  # edited by hand
    at = next(i for i, x in enumerate(lines) if "hold" in x)
    lines[at]["hold"] = "a*b"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = runner.invoke(app, ["import", str(bad), "--db", target])
    assert result.exit_code == 2
    assert f"line {at + 1}:" in result.stderr and "'*' only as the last part" in result.stderr
    listed = runner.invoke(app, ["agents", "--db", target, "--json"])
    assert json.loads(listed.stdout)["agents"] == []
    assert _holds(runner, target) == {}
