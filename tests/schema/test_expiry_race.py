"""A session judged expired and touched by another worker before the delete made for it
is kept (trialtime): ``expire``'s sweep and ``store.agent(model=...)`` delete only the
state they read, never a write made since (it was deleted, without an error)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.expiry import expire, is_expired
from statekeeper.schema.structures import Session


def _url(engine: str, tmp_path: Path) -> str:
    return "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"


def _session(age: float, user: str = "u-1") -> Session:
    now = time.time()
    return Session(user_id=user, started_at=now - age, last_seen=now - age, ttl=60.0)


def _touch_before_delete(store: StateStore, agent_id: str) -> list[int]:
    """Make the store's next delete of ``agent_id`` find a write made after the caller
    read it: another worker touches the session first. Returns the seqs written."""
    inner: Callable[[str], Awaitable[bool]] = store.delete
    touched: list[int] = []

    async def delete(target: str) -> bool:
        if target == agent_id and not touched:
            sessions = TypedStates(store, Session)
            snap = await store.load(target)  # (sessions.load: expired, gone)
            state = Session.model_validate({k: v for k, v in snap.data.items() if k != "$model"})
            state.touch()
            assert not is_expired(state)
            result = await sessions.save(target, state, expected_seq=snap.seq)
            touched.append(result.last_seq)
        return await inner(target)

    store.delete = delete  # type: ignore[method-assign,assignment]
    return touched


async def _run(engine: str, tmp_path: Path, body: Callable[[StateStore], Awaitable[Any]]) -> None:
    async with StateStore(_url(engine, tmp_path)) as store:
        await body(store)


# (Redis is not here: its own key TTL removes a session written expired at once)
@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_the_sweep_keeps_a_session_touched_after_it_was_read(
    tmp_path: Path, engine: str
) -> None:
    async def body(store: StateStore) -> None:
        sessions = TypedStates(store, Session)
        await sessions.save("s-1", _session(age=120))  # expired
        await sessions.save("s-2", _session(age=120, user="u-2"))  # expired, left alone
        touched = _touch_before_delete(store, "s-1")
        assert await expire(store, Session) == ["s-2"]
        assert touched == [2]
        kept = await sessions.get("s-1")
        assert kept is not None and not is_expired(kept)
        assert await store.head("s-1") == 2
        assert await store.get("s-2") is None

    await _run(engine, tmp_path, body)


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_opening_an_expired_session_keeps_one_touched_after_it_was_read(
    tmp_path: Path, engine: str
) -> None:
    async def body(store: StateStore) -> None:
        sessions = TypedStates(store, Session)
        await sessions.save("s-1", _session(age=120))
        touched = _touch_before_delete(store, "s-1")
        agent = await store.agent("s-1", model=Session, initial_state=_session(0, user="new"))
        assert touched == [2]
        # the touched session, not a new one started over it
        assert agent.seq == 2 and agent.state.user_id == "u-1"
        assert not is_expired(agent.state)

    await _run(engine, tmp_path, body)


def test_a_touch_after_the_clock_stepped_back_never_shortens_the_session() -> None:
    session = Session(user_id="u-1", started_at=1000.0, last_seen=1000.0, ttl=60.0)
    session.touch(now=2000.0)
    session.touch(now=1500.0)  # the wall clock stepped back: the touch is still activity
    assert session.expires_at == 2060.0  # was 1560: expired again once the clock caught up
    assert not session.expired(now=2001.0)
