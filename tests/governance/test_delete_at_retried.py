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


def conditional_delete(backend: Backend) -> str:
    """The engine call a store's conditional delete makes: with its feed tombstone in
    one commit (``append_together``) where the engine has one, else
    ``delete_agent_at`` (see statekeeper.store.feed_deletes)."""
    return "append_together" if backend.appends_together else "delete_agent_at"


def reply_lost_once(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> list[int]:
    """The conditional delete whose first call is applied and its reply lost: the
    call is sent again (as the engine's retry on a lost connection does); the list
    counts the calls."""
    name = conditional_delete(backend)
    real = getattr(backend, name)
    calls = [0]

    async def lost(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            await real(*args)  # applied... and its reply lost: sent again
        return await real(*args)

    monkeypatch.setattr(backend, name, lost)
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
            name = conditional_delete(store.backend)
            real = getattr(store.backend, name)

            async def lost_then_written(*args: Any) -> Any:
                await real(*args)  # applied, reply lost; then another writer:
                await other.save("a", {"i": 2})  # a new stream, head 1
                return await real(*args)  # the retry

            monkeypatch.setattr(store.backend, name, lost_then_written)
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
            # (the delete and its feed tombstone: one script)
            calls = _flaky_script(backend, "_together_script", landed=True)
            with delete_only_at(1):
                await store.delete("a")
            # one script: its reply lost, the backend settles it by reading what landed
            assert calls[0] == 1
            assert await store.backend.head("a") == 0
            tombstones = [c async for c in store.subscribe(stop_at_head=True)]
            assert [(c.agent_id, c.deleted) for c in tombstones] == [("a", True)]  # once
