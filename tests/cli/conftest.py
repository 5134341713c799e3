"""Fixtures for the CLI tests: a runner with a wide terminal and populated stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ._proc import populate


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CliRunner with a wide terminal and no STATEKEEPER_URL from the environment."""
    monkeypatch.delenv("STATEKEEPER_URL", raising=False)
    return CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A SQLite store with three agents; timestamps come from a clock at 1000, 2000, ...

    * ``alpha``: created (1000), start_processing (2000), call_tool (3000) with
      metadata ``tool=search``, receive_result (4000) writing ``results``: 4 events.
    * ``beta``: created with ``{"n": 1}``, then a plain save ``{"n": 2}``: 2 events, no
      state machine.
    * ``gamma``: created, start_processing, complete: 3 events.
    """
    path = tmp_path / "store.db"
    populate(f"sqlite:///{path}")
    yield path


@pytest.fixture
def url(db: Path) -> str:
    return f"sqlite:///{db}"
