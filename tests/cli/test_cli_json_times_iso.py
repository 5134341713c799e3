"""Every ``--json`` output gives its times as ISO 8601 in UTC (docs/cli.md, "Exit codes
and errors"), as ``agents``, ``show`` and ``history`` do.

Before, three outputs gave epoch seconds as a bare float instead: ``audit --json``
(``time``: the line a SIEM ingests), ``hold list --json`` (``at``) and ``health --json``
(``generated_at``), so a consumer parsing the documented ISO form failed, or read a
number it had to guess the unit of."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.governance import Audit, load_policy
from statekeeper.governance.holds import add_hold
from statekeeper.security import Keyring, generate_key


def _iso_utc(value: object) -> datetime:
    """``value`` as an aware datetime, asserting it is ISO 8601 text in UTC."""
    assert isinstance(value, str), f"not ISO 8601 text: {value!r}"
    when = datetime.fromisoformat(value)
    assert when.utcoffset() == timedelta(0), value
    return when


def _store(tmp_path: Path) -> list[str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    keys = tmp_path / "keys.json"
    Keyring.write_file(keys, {"k1": generate_key()}, "k1")
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.ops]\nadmin = ["**"]\n')

    async def fill() -> None:
        async with StateStore(
            url,
            keyring=Keyring.from_file(keys),
            principal="ops",
            policy=load_policy(policy),
            audit=Audit(),
        ) as store:
            await store.save("acme/a", {"n": 1})
            await add_hold(store, "acme/a", "Smith v. Acme")

    asyncio.run(fill())
    return ["--db", url, "--key-file", str(keys)]


def test_audit_json_time_is_iso_utc(runner: CliRunner, tmp_path: Path) -> None:
    common = _store(tmp_path)
    result = runner.invoke(app, ["audit", *common, "--json"])
    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["operation"] for e in entries][:1] == ["save"]
    times = [_iso_utc(e["time"]) for e in entries]
    assert times == sorted(times) and times[-1] <= datetime.now(UTC)


def test_hold_list_json_at_is_iso_utc(runner: CliRunner, tmp_path: Path) -> None:
    common = _store(tmp_path)
    result = runner.invoke(app, ["hold", "list", *common, "--json"])
    assert result.exit_code == 0, result.output
    [hold] = json.loads(result.stdout)
    assert hold["pattern"] == "acme/a"
    assert _iso_utc(hold["at"]) <= datetime.now(UTC)


def test_health_json_generated_at_is_iso_utc(runner: CliRunner, tmp_path: Path) -> None:
    common = _store(tmp_path)
    result = runner.invoke(app, ["health", *common, "--json"])
    assert result.exit_code in (0, 1), result.output
    assert _iso_utc(json.loads(result.stdout)["generated_at"]) <= datetime.now(UTC)
