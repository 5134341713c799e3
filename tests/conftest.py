"""Shared test configuration.

Tests that need a server (PostgreSQL, Redis, S3) call :func:`require_service`, which
skips with a clear reason when the server is not reachable — unless
``STATEKEEPER_REQUIRE_SERVICES=1`` (set by ``.ci/run``), which turns that skip into a
failure so CI always exercises them.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_SERVICES = os.environ.get("STATEKEEPER_REQUIRE_SERVICES") == "1"


def require_service(name: str, reachable: bool, how: str) -> None:
    """Skip (or, in CI, fail) when the service ``name`` is not reachable."""
    if reachable:
        return
    message = f"{name} not reachable: {how}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (STATEKEEPER_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(message)
