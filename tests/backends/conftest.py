"""Fixtures shared by the backend tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._services import drop_schema, namespace, require_postgres


@pytest.fixture
def schema(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL schema of the test's own, dropped before and after it."""
    require_postgres()
    name = namespace(tmp_path)
    drop_schema(name)
    yield name
    drop_schema(name)
