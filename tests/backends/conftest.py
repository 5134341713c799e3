"""Fixtures shared by the backend tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._services import delete_prefix, drop_schema, namespace, require_postgres, require_redis


@pytest.fixture
def schema(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL schema of the test's own, dropped before and after it."""
    require_postgres()
    name = namespace(tmp_path)
    drop_schema(name)
    yield name
    drop_schema(name)


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    """A Redis key prefix of the test's own, its keys deleted before and after it."""
    require_redis()
    name = namespace(tmp_path) + ":"
    delete_prefix(name)
    yield name
    delete_prefix(name)
