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
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import AgentStates
from statekeeper.governance import Audit, load_policy
from statekeeper.governance.holds import add_hold
from statekeeper.security import Keyring, generate_key

from .test_cli_intents import ELSEWHERE, stuck


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


def test_audit_since_an_entrys_printed_time_lists_that_entry(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``audit --since TIME`` lists the entries "at or after TIME": given the ``time`` an
    entry was printed with (``--json``, the SIEM's resume point), that entry is among them.
    Its ISO time is to the microsecond, rounded: an entry whose time rounded up was
    printed after its own time, and ``--since`` it left the entry out (and every entry
    of that microsecond before the printed time)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    keys = tmp_path / "keys.json"
    Keyring.write_file(keys, {"k1": generate_key()}, "k1")
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.ops]\nadmin = ["**"]\n')
    at = 1_765_000_000.1234567  # (its microsecond rounds up: .123457)

    async def fill() -> None:
        async with StateStore(
            url,
            keyring=Keyring.from_file(keys),
            principal="ops",
            policy=load_policy(policy),
            audit=Audit(clock=lambda: at),
        ) as store:
            await store.save("a", {"n": 1})

    asyncio.run(fill())
    common = ["--db", url, "--key-file", str(keys)]
    result = runner.invoke(app, ["audit", *common, "--json"])
    assert result.exit_code == 0, result.output
    [entry] = [json.loads(line) for line in result.stdout.splitlines()]
    assert _iso_utc(entry["time"]).timestamp() > at  # (what this test is about)
    again = runner.invoke(app, ["audit", *common, "--json", "--since", entry["time"]])
    assert again.exit_code == 0, again.output
    assert [json.loads(line)["seq"] for line in again.stdout.splitlines()] == [entry["seq"]]
    # a time past the entry's microsecond still leaves it out
    later = (_iso_utc(entry["time"]) + timedelta(microseconds=1)).isoformat()
    after = runner.invoke(app, ["audit", *common, "--json", "--since", later])
    assert after.exit_code == 0, after.output
    assert after.stdout.strip() == ""


def test_feed_intents_json_written_is_iso_utc(runner: CliRunner, tmp_path: Path) -> None:
    """``feed-intents --json``: ``written`` (when the intent was written) as ISO 8601
    in UTC — it was epoch seconds, beside the outputs above."""
    db = tmp_path / "s.db"
    stuck(db, {"acme/kept": ELSEWHERE})
    result = runner.invoke(app, ["feed-intents", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    [intent] = json.loads(result.stdout)
    assert intent["agent_id"] == "acme/kept"
    assert _iso_utc(intent["written"]) <= datetime.now(UTC)


def test_projections_status_json_updated_at_is_iso_utc(runner: CliRunner, tmp_path: Path) -> None:
    """``projections status --json``: ``updated_at`` (the projection's last change) as
    ISO 8601 in UTC — it was epoch seconds."""
    db = tmp_path / "s.db"

    async def project() -> None:
        async with StateStore(f"sqlite:///{db}") as store:
            await store.save("a", {"n": 1})
            async with ProjectionRunner(
                store, tmp_path / "s.projections.db", [AgentStates()]
            ) as projections:
                await projections.catch_up()

    asyncio.run(project())
    result = runner.invoke(app, ["projections", "status", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    [row] = [r for r in json.loads(result.stdout) if r["name"] == "agent_states"]
    assert _iso_utc(row["updated_at"]) <= datetime.now(UTC)
