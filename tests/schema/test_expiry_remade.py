"""A session judged expired is deleted only as the stream it was read from: another
worker deleting it and starting a new session under the same id, up to the same seq,
before the delete made for the old one, keeps its new session. The delete was
conditional on the seq alone (trialtime), so the new session — an acknowledged write —
was deleted by ``expire``'s sweep and by ``store.agent(model=...)``. Now it is
conditional on the head event's stored checksum too, read before the state is judged
again. The other worker runs from a hook on the store's delete (no sleeps)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.expiry import expire, is_expired
from statekeeper.schema.structures import Session

from ..backends._services import fresh_url

# (Redis is not here: its own key TTL removes a session written expired at once)
ENGINES = ["memory", "sqlite", "postgresql", pytest.param("s3", marks=pytest.mark.slow)]


def _session(age: float, user: str = "u-1") -> Session:
    now = time.time()
    return Session(user_id=user, started_at=now - age, last_seen=now - age, ttl=60.0)


def _made_again_before_delete(store: StateStore, agent_id: str) -> list[int]:
    """Before the store's next delete of ``agent_id``: another worker deletes it and
    starts a new session there (head 1 again). Returns the head it made."""
    inner: Callable[[str], Awaitable[bool]] = store.delete
    made: list[int] = []

    async def delete(target: str) -> bool:
        if target == agent_id and not made:
            assert await inner(target)
            result = await TypedStates(store, Session).save(target, _session(age=0, user="new"))
            made.append(result.last_seq)
        return await inner(target)

    store.delete = delete  # type: ignore[method-assign,assignment]
    return made


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_sweep_keeps_a_session_made_again_up_to_the_same_seq(
    tmp_path: Path, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            sessions = TypedStates(store, Session)
            await sessions.save("s-1", _session(age=120))  # expired
            made = _made_again_before_delete(store, "s-1")
            assert await expire(store, Session) == []
            assert made == [1]
            kept = await sessions.get("s-1")
            assert kept is not None and kept.user_id == "new" and not is_expired(kept)


@pytest.mark.parametrize("engine", ENGINES)
async def test_opening_keeps_a_session_made_again_up_to_the_same_seq(
    tmp_path: Path, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await TypedStates(store, Session).save("s-1", _session(age=120))  # expired
            made = _made_again_before_delete(store, "s-1")
            agent = await store.agent("s-1", model=Session)
            assert made == [1]
            assert agent.state.user_id == "new"  # the new session, not a fresh default
            assert await store.head("s-1") == 1
