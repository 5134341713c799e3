"""A conditional delete (``delete_agent_at``: a retention purge) whose reply is lost
after it was applied, while another writer creates the agent again: the backend's own
retry used to meet the new stream as it is now — at the same head it deleted it, with
the other writer's acknowledged events, and reported the delete done; at another head
it reported a conflict for a delete it had made. The retry now recognises its own
applied try (PostgreSQL: the first transaction's ``txid_status``; Redis: the script's
receipt) and reports the delete done without deleting again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore

from ._services import fresh_url


async def recreate(other: StateStore, head: int) -> None:
    """Another writer creates the agent ``a`` again, up to ``head``."""
    for i in range(head):
        await other.save("a", {"again": i})


@pytest.mark.parametrize("head_again", [2, 1], ids=["same-head", "other-head"])
async def test_postgres_retry_after_a_lost_commit_reply_deletes_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head_again: int
) -> None:
    import psycopg

    with fresh_url("postgresql", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            backend: Any = store.backend
            real, real_change = backend._connection, backend._change
            deleting: list[Any] = []  # the connection whose transaction deletes
            armed = [True]

            async def change(conn: Any, stream_change: Any) -> None:
                deleting.append(conn)
                await real_change(conn, stream_change)

            @contextlib.asynccontextmanager
            async def dying() -> AsyncIterator[Any]:
                async with real() as conn:
                    yield conn
                if armed[0] and conn in deleting:  # its transaction committed ...
                    armed[0] = False
                    await recreate(other, head_again)
                    # ... and the reply is lost
                    raise psycopg.OperationalError("server closed the connection unexpectedly")

            monkeypatch.setattr(backend, "_change", change)
            monkeypatch.setattr(backend, "_connection", dying)
            assert await backend.delete_agent_at("a", 2) is True
            assert not armed[0]
            monkeypatch.undo()
            assert await backend.head("a") == head_again  # the other writer's stream kept
            assert (await other.load("a")).data == {"again": head_again - 1}


@pytest.mark.parametrize("head_again", [2, 1], ids=["same-head", "other-head"])
async def test_redis_retry_after_a_lost_script_reply_deletes_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head_again: int
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            backend: Any = store.backend
            real = backend._delete_script
            calls = [0]

            async def flaky(**kwargs: object) -> object:
                calls[0] += 1
                if calls[0] == 1:
                    await real(**kwargs)  # applied ...
                    await recreate(other, head_again)
                    raise RedisConnectionError("Connection closed by server.")  # ... reply lost
                return await real(**kwargs)

            monkeypatch.setattr(backend, "_delete_script", flaky)
            assert await backend.delete_agent_at("a", 2) is True
            assert calls[0] == 2  # sent again, and recognised as applied
            assert await backend.head("a") == head_again  # the other writer's stream kept
            assert (await other.load("a")).data == {"again": head_again - 1}


async def test_postgres_delete_whose_commit_reply_is_lost_says_it_existed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``delete_agent`` (``statekeeper delete``): the retry after a lost COMMIT reply
    answered "it did not exist" (its own delete had run), now the first try's answer."""
    import psycopg

    with fresh_url("postgresql", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            backend: Any = store.backend
            real = backend._connection
            armed = [True]

            @contextlib.asynccontextmanager
            async def dying() -> AsyncIterator[Any]:
                async with real() as conn:
                    yield conn
                if armed[0] and await other.backend.head("a") == 0:  # the delete committed
                    armed[0] = False  # ... and its reply is lost
                    raise psycopg.OperationalError("server closed the connection unexpectedly")

            monkeypatch.setattr(backend, "_connection", dying)
            assert await backend.delete_agent("a") is True
            assert not armed[0]
            monkeypatch.undo()
            assert await backend.head("a") == 0
            assert await backend.delete_agent("a") is False  # really gone now


async def test_redis_delete_whose_reply_is_lost_says_it_existed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("a", {"i": 0})
            backend: Any = store.backend
            real = backend._delete_script
            calls = [0]

            async def flaky(**kwargs: object) -> object:
                calls[0] += 1
                if calls[0] == 1:
                    await real(**kwargs)  # applied ...
                    raise RedisConnectionError("Connection closed by server.")  # ... reply lost
                return await real(**kwargs)

            monkeypatch.setattr(backend, "_delete_script", flaky)
            assert await backend.delete_agent("a") is True
            assert calls[0] == 2
            assert await backend.head("a") == 0
            assert await backend.delete_agent("a") is False  # really gone now
