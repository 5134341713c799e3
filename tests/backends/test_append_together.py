"""``Backend.append_together``: several streams' appends in one commit, all or none
(what the audit log's entries are committed with)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend
from statekeeper.backends.url import open_backend
from statekeeper.errors import CapabilityUnsupported, ConflictError
from statekeeper.records import AppendRequest, RawEvent

from ._services import fresh_url


def _request(agent_id: str, expected: int, key: str | None = None) -> AppendRequest:
    seq = expected + 1
    event = RawEvent(seq, "e", 1.0 + seq, b"payload-%d" % seq, b"sum-%d" % seq)
    return AppendRequest(agent_id, expected, [event], idempotency_key=key)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    with fresh_url(request.param, tmp_path) as url:
        engine = open_backend(url)
        try:
            yield engine
        finally:
            await engine.close()


async def test_all_commit_together(backend: Backend) -> None:
    assert backend.appends_together
    results = await backend.append_together([_request("a", 0), _request("b", 0)])
    assert [(r.agent_id, r.last_seq) for r in results if r is not None] == [("a", 1), ("b", 1)]
    assert await backend.head("a") == 1 and await backend.head("b") == 1


async def test_a_conflict_writes_nothing(backend: Backend) -> None:
    await backend.append(_request("b", 0))
    with pytest.raises(ConflictError) as caught:
        # "a" alone would succeed; "b" expects a head it does not have
        await backend.append_together([_request("a", 0), _request("b", 0)])
    assert caught.value.agent_id == "b"
    assert await backend.head("a") == 0
    assert await backend.head("b") == 1


async def test_a_duplicate_writes_nothing(backend: Backend) -> None:
    await backend.append(_request("a", 0, key="k"))
    results = await backend.append_together([_request("a", 1, key="k"), _request("b", 0)])
    first, second = results
    assert first is not None and first.duplicate and first.last_seq == 1
    assert second is None
    assert await backend.head("a") == 1 and await backend.head("b") == 0


async def test_engines_without_it_refuse(tmp_path: Path) -> None:
    with fresh_url("redis", tmp_path) as url:
        engine = open_backend(url)
        try:
            assert not engine.appends_together
            with pytest.raises(CapabilityUnsupported, match="append_together"):
                await engine.append_together([_request("a", 0)])
            assert await engine.head("a") == 0
        finally:
            await engine.close()
