"""``statekeeper repair``, run as a subprocess: dry run by default (writes nothing,
byte for byte), ``--apply`` rebuilds damaged snapshots from the verified events, and
the exit codes say what is left (0 clean, 1 repairs pending, 3 not repairable)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store._raw import Env, raw_env

from ._proc import run_in_process


def _cli(*args: str, real: bool = False) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS``: in a real process when ``real`` (verify and repair run so on
    SQLite), else through the console script's entry point in this process, with the
    same environment (a fresh interpreter costs about half a CPU-second)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    env["COLUMNS"] = "120"
    if not real:
        code, stdout, stderr = run_in_process(args, env)
        return subprocess.CompletedProcess(["statekeeper", *args], code, stdout, stderr)
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with raw_env(request.param, tmp_path) as e:
        yield e


def _url(env: Env) -> str:
    url = env.url_or_backend()
    assert isinstance(url, str)
    return url


def _populate(env: Env) -> None:
    async def go() -> None:
        async with env.open(snapshot_every=3) as store:
            for agent in ("a-1", "a-2"):
                for n in range(1, 11):
                    await store.save(agent, {"owner": agent, "n": n})

    asyncio.run(go())


def test_dry_run_writes_nothing_and_apply_repairs(env: Env) -> None:
    _populate(env)
    env.raw.damage_snapshot("a-1", 6)
    env.raw.damage_snapshot("a-2", 9)
    url = _url(env)
    real = url.startswith("sqlite")  # real processes on SQLite, this one on the servers

    checked = _cli("verify", "--db", url, "--json", real=real)
    assert checked.returncode == 1
    problems = json.loads(checked.stdout)["problems"]
    assert [(p["agent_id"], p["seq"], p["kind"]) for p in problems] == [
        ("a-1", 6, "snapshot"),
        ("a-2", 9, "snapshot"),
    ]

    text = _cli("verify", "--db", url, real=real)
    assert text.returncode == 1 and "statekeeper repair" in text.stdout

    before = env.raw.dump()
    dry = _cli("repair", "--db", url, real=real)
    assert dry.returncode == 1, dry.stderr
    assert "dry run" in dry.stdout and "--apply" in dry.stdout
    assert "a-1" in dry.stdout and "a-2" in dry.stdout
    assert "2 snapshot(s) to rebuild" in dry.stdout
    assert env.raw.dump() == before  # byte for byte

    applied = _cli("repair", "--db", url, "--apply", real=real)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "rebuilt 2 snapshot(s)" in applied.stdout
    assert env.raw.dump() != before

    assert _cli("verify", "--db", url, real=real).returncode == 0
    again = _cli("repair", "--db", url, "--json", real=real)
    assert again.returncode == 0
    assert json.loads(again.stdout)["changes"] == []


def test_damaged_events_are_reported_not_repaired(tmp_path: Path) -> None:
    with raw_env("sqlite", tmp_path) as env:
        _populate(env)
        env.raw.damage_snapshot("a-1", 3)
        env.raw._run(  # type: ignore[attr-defined]
            "UPDATE sk_events SET payload = CAST('x' AS BLOB) WHERE agent_id='a-2' AND seq=5"
        )
        before = env.raw.dump()
        url = _url(env)
        result = _cli("repair", "--db", url, "--apply", "--json")
        assert result.returncode == 3, result.stdout + result.stderr
        out = json.loads(result.stdout)
        assert [(c["agent_id"], c["seq"]) for c in out["changes"]] == [("a-1", 3)]
        assert ("a-2", 5, "event") in [
            (p["agent_id"], p["seq"], p["kind"]) for p in out["unrepairable"]
        ]
        # a-1 was repaired; nothing of a-2 (whose events do not verify) was written
        after = env.raw.dump()
        assert [line for line in after if "'a-2'" in line] == [
            line for line in before if "'a-2'" in line
        ]
        text = _cli("repair", "--db", url)
        assert text.returncode == 3
        assert "repair cannot fix" in text.stdout


def test_unknown_agent_and_help(tmp_path: Path) -> None:
    with raw_env("sqlite", tmp_path) as env:
        _populate(env)
        missing = _cli("repair", "--db", _url(env), "nobody")
        assert missing.returncode == 1
        assert "nobody" in missing.stderr and "Traceback" not in missing.stderr
        assert _cli("repair", "--db", _url(env), "a-1").returncode == 0
    helped = _cli("repair", "--help")
    assert helped.returncode == 0 and "--apply" in helped.stdout


def test_a_dry_run_finding_only_damage_does_not_send_to_apply(tmp_path: Path) -> None:
    """A dry run that found nothing to rebuild, only damage repair cannot fix, said "0
    snapshot(s) to rebuild ...; run again with --apply to write" — an --apply that
    writes nothing — beside "1 problem(s) repair cannot fix"."""
    with raw_env("sqlite", tmp_path) as env:
        _populate(env)
        env.raw._run(  # type: ignore[attr-defined]
            "UPDATE sk_events SET payload = CAST('x' AS BLOB) WHERE agent_id='a-2' AND seq=5"
        )
        result = _cli("repair", "--db", _url(env))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "nothing to rebuild" in result.stdout
    assert "--apply" not in result.stdout
    assert "1 problem(s) repair cannot fix" in result.stdout
