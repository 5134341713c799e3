"""``statekeeper langgraph prune``: retention from the command line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from statekeeper.cli import app
from statekeeper.cli.langgraph import parse_duration
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.security import Keyring, generate_key
from tests.keyfiles import write_key_file

from .conftest import Api, Chain, checkpoint, config


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("STATEKEEPER_URL", raising=False)
    return CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})


async def _populate(url: str) -> tuple[str, str]:
    with StatekeeperSaver.from_url(url) as saver:
        a, b = Chain(Api(saver, "sync")), Chain(Api(saver, "sync"))
        for i in range(5):
            await a.step({"i": i})
        await b.step({"i": 0})
        return a.thread_id, b.thread_id


async def test_prune_keep_last(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    a, b = await _populate(url)
    dry = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--keep-last", "2", "--dry-run", "--json"]
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["checkpoints_deleted"] == 3
    done = runner.invoke(app, ["--db", url, "langgraph", "prune", "--keep-last", "2"])
    assert done.exit_code == 0, done.output
    assert "removed 3 checkpoint(s)" in done.output
    with StatekeeperSaver.from_url(url) as saver:
        assert len(list(saver.list(config(a)))) == 2
        assert len(list(saver.list(config(b)))) == 1


async def test_prune_ttl_one_thread(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    a, b = await _populate(url)
    await asyncio.sleep(1.1)
    out = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--ttl", "1s", "--thread", a, "--json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["threads_deleted"] == 1
    with StatekeeperSaver.from_url(url) as saver:
        assert saver.get_tuple(config(a)) is None
        assert saver.get_tuple(config(b)) is not None


async def test_prune_of_a_thread_that_does_not_exist_names_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``--thread <typo>`` reported "0 thread(s) scanned" and exited 0: the prune the
    user asked for silently did nothing. The thread is now named as not found (exit 1,
    as for an agent that does not exist), before any thread is pruned."""
    url = f"sqlite:///{tmp_path}/lg.db"
    a, _ = await _populate(url)
    out = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--keep-last", "1", "-t", a, "-t", "typo-42"]
    )
    assert out.exit_code == 1, out.output
    assert "LangGraph thread 'typo-42' not found" in out.output
    assert "scanned" not in out.output
    with StatekeeperSaver.from_url(url) as saver:
        assert len(list(saver.list(config(a)))) == 5  # the named one was left as it was
    # the same thread under another prefix is not there either
    other = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--keep-last", "1", "-t", a, "--prefix", "x/"]
    )
    assert other.exit_code == 1, other.output
    assert f"{a!r} not found" in other.output and "'x/'" in other.output


def test_prune_usage_errors(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing.db"
    assert (
        runner.invoke(app, ["langgraph", "prune", "--db", url, "--keep-last", "1"]).exit_code == 2
    )
    assert runner.invoke(app, ["langgraph", "prune", "--db", url]).exit_code == 2
    bad = runner.invoke(app, ["langgraph", "prune", "--db", url, "--ttl", "soon"])
    assert bad.exit_code == 2


def test_parse_duration() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("1.5h") == 5400
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("2w") == 14 * 86400
    with pytest.raises(typer.BadParameter):
        parse_duration("3 fortnights")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**base, "COLUMNS": "160", "NO_COLOR": "1", **(env or {})},
    )


def _key_file(tmp_path: Path) -> Path:
    key_file = tmp_path / "keys.json"
    write_key_file(key_file, {"active": "k1", "keys": {"k1": generate_key()}})
    return key_file


def test_prune_opens_an_encrypted_store(tmp_path: Path) -> None:
    key_file = _key_file(tmp_path)
    url = f"sqlite:///{tmp_path}/enc.db"
    with StatekeeperSaver.from_url(url, keyring=Keyring.from_file(key_file)) as saver:
        chain = Chain(Api(saver, "sync"))
        for i in range(4):
            asyncio.run(chain.step({"i": i}))
    # without the key the store cannot be read: a clear error, nothing removed
    refused = _cli("langgraph", "prune", "--db", url, "--keep-last", "1", "--json")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert "key" in refused.stderr
    with StatekeeperSaver.from_url(url, keyring=Keyring.from_file(key_file)) as saver:
        assert len(list(saver.list(config(chain.thread_id)))) == 4  # nothing changed
    by_option = _cli(
        "langgraph", "prune", "--db", url, "--keep-last", "2", "--key-file", str(key_file), "--json"
    )
    assert by_option.returncode == 0, by_option.stderr
    assert json.loads(by_option.stdout)["checkpoints_deleted"] == 2
    by_env = _cli(
        "langgraph",
        "prune",
        "--db",
        url,
        "--keep-last",
        "1",
        "--json",
        env={"STATEKEEPER_KEY_FILE": str(key_file)},
    )
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout)["checkpoints_deleted"] == 1
    with StatekeeperSaver.from_url(url, keyring=Keyring.from_file(key_file)) as saver:
        assert [t.checkpoint["id"] for t in saver.list(config(chain.thread_id))] == chain.ids[-1:]


def test_thread_ids_are_stored_in_clear_values_encrypted(tmp_path: Path) -> None:
    """What docs/langgraph.md says: a thread id is part of the agent id (a plain key)."""
    keyring = Keyring.from_file(_key_file(tmp_path))
    path = tmp_path / "clear.db"
    with StatekeeperSaver.from_url(f"sqlite:///{path}", keyring=keyring) as saver:
        thread = "customer-4711-thread"
        saver.put(
            config(thread),
            checkpoint({"note": "value-marker-secret"}, {"note": 1}),
            {"m": "meta-marker-secret"},  # type: ignore[typeddict-unknown-key]
            {"note": 1},
        )
    raw = path.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("clear.db-*"))
    assert b"customer-4711-thread" in raw
    assert b"value-marker-secret" not in raw and b"meta-marker-secret" not in raw
