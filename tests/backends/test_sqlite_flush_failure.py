"""A commit of the SQLite commit queue that fails as a whole (``SQLiteBackend._flush``):
made on the loop (``_inline``) or its statements written on the loop and its COMMIT
handed off (``_write_batch``), the failure reaches every queued append's future, the
queue goes on with the appends that joined meanwhile, and a ``BaseException`` that is
not an ``Exception`` (an interrupt) is raised out of the flush too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.sqlite import commits as sqlite_commits
from statekeeper.errors import BackendError


class _Interrupt(BaseException):
    """Not an ``Exception``: the flush raises it on."""


def _row(agent_id: str) -> tuple[Any, ...]:
    return (agent_id, 1, 1.0, b"payload", b"checksum", None, None, None)


def _raising(error: BaseException, called: list[int]) -> Callable[..., Any]:
    def write(requests: Any) -> Any:
        called.append(len(requests))
        raise error

    return write


@pytest.mark.parametrize("where", ["_inline", "_write_batch"])
@pytest.mark.parametrize("error", [BackendError("disk on fire"), _Interrupt("stop")])
async def test_a_failed_commit_reaches_every_queued_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, error: BaseException
) -> None:
    backend = SQLiteBackend(tmp_path / "flush.db", synchronous="OFF")
    loop = asyncio.get_running_loop()
    try:
        await backend.append_next(*_row("opened"))
        called: list[int] = []
        monkeypatch.setattr(backend, where, _raising(error, called))
        if where == "_write_batch":  # (a batch with other work ready: handed off)
            monkeypatch.setattr(sqlite_commits, "INLINE_BATCH", 0)
            loop.call_soon(lambda: None)
        futures = [loop.create_future() for _ in range(2)]
        backend._queues[loop] = [(_row(f"a{i}"), f) for i, f in enumerate(futures)]
        if isinstance(error, Exception):
            backend._flush(loop)
        else:
            with pytest.raises(_Interrupt):
                backend._flush(loop)
        assert called == [2]
        assert [f.exception() for f in futures] == [error, error]
        assert loop not in backend._queues and loop not in backend._in_flight
        monkeypatch.undo()
        assert await backend.head("a0") == 0  # nothing written
        await backend.append_next(*_row("a0"))  # the queue goes on
        assert await backend.head("a0") == 1
    finally:
        await backend.close()
