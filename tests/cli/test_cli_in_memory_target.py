"""A command that writes into a store to keep refuses a private in-memory one
(``memory://``, ``sqlite://``, ``sqlite:///``, ``sqlite:///:memory:``): each command
opens its own, empty, and it is gone when the command ends. Before, ``import`` and
``restore`` there printed "✓ imported/restored and verified ..." with exit code 0 and
kept nothing, and ``init`` said it "is already a statekeeper store"."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper.backends.url import is_in_memory
from statekeeper.cli import app

MEMORY = ["memory://", "sqlite://", "sqlite:///", "sqlite:///:memory:"]


@pytest.mark.parametrize("target", MEMORY)
def test_import_restore_and_init_refuse_an_in_memory_store(
    runner: CliRunner, url: str, tmp_path: Path, target: str
) -> None:
    export = tmp_path / "all.jsonl"
    done = runner.invoke(app, ["export", "--db", url, "-o", str(export)])
    assert done.exit_code == 0, done.output
    backup, key = tmp_path / "b.skb", tmp_path / "b.key"
    args = ["backup", "--db", url, "--to", str(backup), "--backup-key", str(key)]
    made = runner.invoke(app, [*args, "--create-backup-key"])
    assert made.exit_code == 0, made.output
    for args, command in (
        (["import", str(export), "--db", target], "import"),
        (["restore", str(backup), "--to", target, "--backup-key", str(key)], "restore"),
        (["init", target], "init"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert f"{target} is a private in-memory store" in result.stderr, result.stderr
        assert f"`statekeeper {command}`" in result.stderr
        assert "✓" not in result.stdout


def test_reading_an_in_memory_store_still_works(runner: CliRunner) -> None:
    result = runner.invoke(app, ["agents", "--db", "memory://"])
    assert result.exit_code == 0 and "no agents" in result.output


@pytest.mark.parametrize(
    ("url", "memory"),
    [
        *((u, True) for u in MEMORY),
        ("sqlite:///a.db", False),
        ("a.db", False),
        ("sqlite:////abs/a.db", False),
        ("postgresql://h/db", False),
        ("tiered://?hot=memory%3A%2F%2F&durable=sqlite%3A%2F%2F%2Fa.db", False),
    ],
)
def test_is_in_memory(url: str, memory: bool) -> None:
    assert is_in_memory(url) is memory
