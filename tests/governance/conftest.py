"""Fixtures for governance tests: one store per principal over the same engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import open_backend
from statekeeper.governance import Audit, Policy, parse_policy

from ..backends._services import fresh_url
from ._keyring import KEYRING as KEYRING  # (re-exported: the tests import it from here)

POLICY_TEXT = """\
[roles.acme-support]
read = ["acme/**"]
write = ["acme/support/**"]

[principals.alice]
roles = ["acme-support"]

[principals.bob]
write = ["globex/*"]

[principals.ops]
admin = ["**"]
"""


@pytest.fixture
def policy() -> Policy:
    return parse_policy(POLICY_TEXT)


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def engine_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def as_principal(engine_url: str, policy: Policy) -> AsyncIterator[Callable[..., StateStore]]:
    """``as_principal("alice")``: a store over the test's engine acting as alice
    (every store of a test shares the engine's data; memory shares one backend)."""
    shared = open_backend(engine_url) if engine_url.startswith("memory") else None
    opened: list[StateStore] = []

    def make(principal: str | None, **options: Any) -> StateStore:
        backend = shared if shared is not None else open_backend(engine_url)
        options.setdefault("keyring", KEYRING)
        if principal is not None:
            options.setdefault("policy", policy)
            options.setdefault("audit", Audit())
        store = StateStore(backend, principal=principal, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if shared is None:
            await store.close()
        else:
            await store.flush()
    if shared is not None:
        await shared.close()
