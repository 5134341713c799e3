"""Fixtures of the change-feed tests: a store URL on every engine with a feed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..backends._services import fresh_url


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def feed_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store's URL on each engine that offers the change feed."""
    with fresh_url(request.param, tmp_path) as url:
        yield url
