"""A duration written ``6M`` is refused, not read as six minutes (trialtime): to many
operators (ISO 8601, date formats) M is months, and a retention ``ttl=6M`` deleted
every agent idle for six minutes, ``langgraph prune --ttl 6M`` every checkpoint older
than that — without an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper._durations import seconds_in
from statekeeper.cli import app
from statekeeper.errors import RetentionPolicyError
from statekeeper.governance.retention_policy import RetentionPolicy


@pytest.mark.parametrize("text", ["6M", "1M30s", "3 M"])
def test_a_capital_m_is_refused(text: str) -> None:
    assert seconds_in(text) is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("6m", 360.0), ("500MS", 0.5), ("500Ms", 0.5), ("2H", 7200.0)]
)
def test_other_units_read_in_either_case(text: str, seconds: float) -> None:
    assert seconds_in(text) == seconds


def test_a_policy_with_ttl_6M_is_refused_naming_it() -> None:
    with pytest.raises(RetentionPolicyError) as caught:
        RetentionPolicy.parse("*  ttl=6M\n")
    assert "'6M'" in str(caught.value)


def test_langgraph_prune_ttl_6M_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    assert runner.invoke(app, ["init", url]).exit_code == 0
    result = runner.invoke(app, ["langgraph", "prune", "--db", url, "--ttl", "6M", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "'6M' is not a positive duration" in " ".join(result.output.split())
