"""PostgreSQL's ``append_together`` of changes alone (a tiered store's prune or rewrite,
committed with the check of the agent's demoted-agent marker) settles a lost
connection as a plain prune or rewrite does — it is not left "unknown".

Before, any lost connection there raised ``BackendError(maybe_applied=True)`` at once:
one that died before the COMMIT (nothing applied, and a plain ``prune`` would have
been sent again) and one whose COMMIT landed but whose reply was lost (done: a plain
prune's retry finds nothing left to remove). A tiered store on PostgreSQL, whose prune
and rewrite went through ``prune``/``rewrite`` before and retried, raised on each
restart or failover of the server. Now each try learns its transaction id before its
COMMIT: after a lost connection, a try that committed is the answer (nothing sent
again), else the changes are sent again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.base import Backend
from statekeeper.backends.url import open_backend
from statekeeper.records import RewriteRequest, StreamChange
from statekeeper.testing._contract import request

from ._services import fresh_url

MARKER = "\x01sk-cold/a"


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Backend]:
    with fresh_url("postgresql", tmp_path) as url:
        found: Any = open_backend(url)
        await found.open()
        try:
            await found.append(request("a", 0, 4, snap_at=2))
            await found.append(request(MARKER, 0, snap_at=1))
            yield found
        finally:
            await found.close()


async def _changes(backend: Backend) -> list[StreamChange]:
    """A prune of "a" with its marker's claim given another head tag (a tiered check)."""
    head, tag = await backend.head_tag(MARKER)
    fence = RewriteRequest(MARKER, head, tag, head_tag=b"f" * 16)
    return [StreamChange("a", prune_to=2), StreamChange(MARKER, rewrite=fence)]


async def test_a_commit_whose_reply_is_lost_is_done_and_not_sent_again(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    changes = await _changes(backend)
    real, real_change = backend._connection, backend._change
    changing: list[Any] = []  # the connections whose transaction made the changes
    lost = [0]

    async def change(conn: Any, stream_change: StreamChange) -> None:
        changing.append(conn)
        await real_change(conn, stream_change)

    @contextlib.asynccontextmanager
    async def dying(*args: Any, **kw: Any) -> AsyncIterator[Any]:
        async with real(*args, **kw) as conn:
            yield conn
        if conn in changing and not lost[0]:  # its transaction committed ...
            lost[0] += 1  # ... and its reply is lost
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(backend, "_change", change)
    monkeypatch.setattr(backend, "_connection", dying)
    assert await backend.append_together([], changes) == []  # main: BackendError
    monkeypatch.undo()
    assert lost[0] == 1
    assert len({id(c) for c in changing}) == 1  # (not sent again: its commit was read)
    assert [e.seq for e in await backend.read("a")] == [3, 4]
    assert await backend.head_tag(MARKER) == (1, b"f" * 16)


async def test_a_connection_lost_before_the_commit_sends_the_changes_again(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    changes = await _changes(backend)
    real_change = backend._change
    calls = [0]

    async def change(conn: Any, stream_change: StreamChange) -> None:
        calls[0] += 1
        if calls[0] == 1:  # (the first try's transaction rolls back: nothing applied)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        await real_change(conn, stream_change)

    monkeypatch.setattr(backend, "_change", change)
    assert await backend.append_together([], changes) == []  # main: BackendError
    monkeypatch.undo()
    assert calls[0] == 3  # (the second try: both changes)
    assert [e.seq for e in await backend.read("a")] == [3, 4]
    assert await backend.head_tag(MARKER) == (1, b"f" * 16)


async def test_a_refusal_after_a_lost_connection_is_still_typed(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The try sent again meets the marker changed (another process's claim): its
    ConflictError naming the marker, nothing pruned — as a first try's."""
    import psycopg

    from statekeeper.errors import ConflictError

    changes = await _changes(backend)
    real_change = backend._change
    calls = [0]

    async def change(conn: Any, stream_change: StreamChange) -> None:
        calls[0] += 1
        if calls[0] == 1:
            # the connection lost (its transaction ended by the server: the marker's head,
            # which it locked first, free again), then another process's append
            await conn.close()
            await backend.append(request(MARKER, 1))
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        await real_change(conn, stream_change)

    monkeypatch.setattr(backend, "_change", change)
    with pytest.raises(ConflictError) as caught:
        await backend.append_together([], changes)
    monkeypatch.undo()
    assert caught.value.agent_id == MARKER
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]
