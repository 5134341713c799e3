"""A conditional delete (a retention purge's ``delete_agent_at``) whose first reply was
lost and which is sent again (the PostgreSQL and Redis backends retry a call on a lost
connection) met its own delete: head 0, reported as a ConflictError, so the purge said
"skipped: written since" of an agent it had deleted. The retry now sees the stream
already gone and reports the delete done (nothing there to lose), and a stream written
again since, at any head, is still never deleted by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.errors import ConflictError
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.store.conditional import delete_only_at

from ..backends._services import fresh_url

T0 = 1_000_000.0
POLICY = RetentionPolicy.parse("stale ttl=1h\n")
ENGINES = ["memory", "sqlite", "postgresql", "redis", "s3"]


def reply_lost_once(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> list[int]:
    """``backend.delete_agent_at`` whose first call is applied and its reply lost: the
    call is sent again (as the engine's retry on a lost connection does); the list
    counts the calls."""
    real = backend.delete_agent_at
    calls = [0]

    async def lost(agent_id: str, head: int) -> bool:
        calls[0] += 1
        if calls[0] == 1:
            await real(agent_id, head)  # applied... and its reply lost: sent again
        return await real(agent_id, head)

    monkeypatch.setattr(backend, "delete_agent_at", lost)
    return calls


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_purge_whose_delete_is_sent_twice_reports_it_done(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [T0]
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: now[0]) as store:
            await store.save("stale/d", {"i": 0})
            await store.save("stale/d", {"i": 1})
            calls = reply_lost_once(monkeypatch, store.backend)
            report = await apply_retention(store, POLICY, now=T0 + 7200)
            assert calls[0] == 1
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("stale/d", "done")]
            assert report.purged == 1
            assert await store.backend.head("stale/d") == 0


@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "memory"])
async def test_the_retry_never_deletes_a_stream_written_since(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            real = store.backend.delete_agent_at

            async def lost_then_written(agent_id: str, head: int) -> bool:
                await real(agent_id, head)  # applied, reply lost; then another writer:
                await other.save("a", {"i": 2})  # a new stream, head 1
                return await real(agent_id, head)  # the retry

            monkeypatch.setattr(store.backend, "delete_agent_at", lost_then_written)
            with pytest.raises(ConflictError) as caught, delete_only_at(2):
                await store.delete("a")
            assert (caught.value.expected_seq, caught.value.current_seq) == (2, 1)
            assert (await store.load("a")).data == {"i": 2}  # the acknowledged write kept


async def test_a_redis_script_whose_reply_is_lost_is_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real retry: the delete script runs, the connection drops before its reply,
    the backend sends it again."""
    from ..backends.test_redis import _flaky_script

    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("a", {"i": 0})
            backend: Any = store.backend
            calls = _flaky_script(backend, "_delete_script", landed=True)
            with delete_only_at(1):
                await store.delete("a")
            assert calls[0] == 2  # sent twice
            assert await store.backend.head("a") == 0
