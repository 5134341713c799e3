"""CI runs everything: the slow tests the default ``pytest`` deselects, and every check
the project promises (lint, format, types, import layers)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip().startswith(".venv/bin/")]


def test_ci_runs_the_slow_tests_too() -> None:
    assert '.venv/bin/pytest -m "slow or not slow"' in _commands()


def test_ci_runs_every_static_check() -> None:
    commands = _commands()
    for check in [
        ".venv/bin/ruff check src tests benchmarks",
        ".venv/bin/ruff format --check src tests benchmarks",
        ".venv/bin/mypy src",
        ".venv/bin/mypy tests",
        ".venv/bin/lint-imports",
    ]:
        assert check in commands, check


def test_the_default_run_deselects_only_the_slow_marker() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pytest_options = options["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in pytest_options["addopts"]
    assert any(m.startswith("slow:") for m in pytest_options["markers"])


def test_the_readme_command_runs_in_parallel_with_a_declared_plugin() -> None:
    """The README's test command uses pytest-xdist (``-n auto``), so a fresh clone's
    ``pip install -e '.[dev]'`` must bring it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "&& .venv/bin/pytest -n auto\n" in readme
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = options["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("pytest-xdist") for d in dev)
