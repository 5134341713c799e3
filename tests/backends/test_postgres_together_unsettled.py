"""PostgreSQL's ``append_together`` (a lease grant, a delete, a snapshot committed with
its audit entry) whose connection failed settles the outcome by reading the first
request's stream back. When that read failed too (the server still unreachable), the
driver's own ``psycopg.OperationalError`` escaped the library, untyped: not a
:class:`~statekeeper.errors.BackendError`, so nothing above it (the lease manager's
recognition of a grant whose reply was lost, ``maybe_applied``) could answer it. It is
now ``BackendError(maybe_applied=True)``: whether it committed is unknown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statekeeper.backends.url import open_backend
from statekeeper.errors import BackendError
from statekeeper.records import LeaseChange, StreamChange
from statekeeper.testing._contract import request

from ._services import fresh_url


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Any]:
    with fresh_url("postgresql", tmp_path) as url:
        opened = open_backend(url)
        try:
            yield opened
        finally:
            await opened.close()


async def test_an_unsettled_atomic_append_is_a_backend_error_that_may_have_applied(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend.append(request("warm", 0))  # (opened: the failures below are ours)

    async def lost(*args: Any) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(backend, "_change", lost)  # the commit's connection lost
    monkeypatch.setattr(backend, "_landed", lost)  # and the read that settles it
    grant = StreamChange("a", lease=LeaseChange("w1", 1, 30.0))
    with pytest.raises(BackendError, match="unknown") as raised:  # (was: OperationalError)
        await backend.append_together([request("log", 0)], [grant])
    assert raised.value.maybe_applied
