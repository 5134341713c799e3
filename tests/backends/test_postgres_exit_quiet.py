"""A PostgreSQL store left open ends without a word when its pool was still connecting.

An application that never closed its store (a LangGraph saver of ``afrom_url``) and
whose ``asyncio.run`` ended while the pool's worker was opening a connection (its
``min_size`` fill, a replacement, a growth) printed psycopg_pool's
``error connecting in 'statekeeper-<schema>': `` — with an empty reason: the
``CancelledError`` of the loop's end, which psycopg_pool catches and logs like a
failed connection. No operation of the application failed; operators alert on these.

A real failure to connect is still logged.

A TCP proxy in front of the shared server forwards the first connections and holds the
later ones (accepted, never answered, or refused) so the race is had without timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from statekeeper.backends.postgres import PostgresBackend

from ._services import POSTGRES_DSN, drop_schema, namespace, require_postgres

_WAIT = 60.0  # an upper bound on waiting for a condition, never a duration waited


class _Proxy:
    """Forwards the first ``forward`` connections to the server; each later one is
    held (accepted and left unanswered) or, with ``refuse``, closed at once."""

    def __init__(self, forward: int, refuse: bool = False) -> None:
        target = urlsplit(POSTGRES_DSN)
        self._upstream = (target.hostname or "127.0.0.1", target.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        user = f"{target.username}@" if target.username else ""
        self.dsn = urlunsplit(target._replace(netloc=f"{user}127.0.0.1:{port}"))
        self._forward = forward
        self._refuse = refuse
        self._sockets: list[socket.socket] = []
        #: set once a connection past the forwarded ones was accepted
        self.extra = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        accepted = 0
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            accepted += 1
            if accepted > self._forward:
                if self._refuse:
                    client.close()
                else:
                    self._sockets.append(client)
                self.extra.set()
                continue
            upstream = socket.create_connection(self._upstream)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            s.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unclosed_backend_whose_pool_is_connecting_when_asyncio_run_ends_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    require_postgres()
    schema = namespace(tmp_path, "sk_pgq_")
    # the open's dial and the pool's first connection pass; its second is held
    proxy = _Proxy(forward=2)

    async def main() -> None:
        backend = PostgresBackend(proxy.dsn, schema=schema, min_size=2, connect_timeout=_WAIT)
        await backend.open()
        await backend.read("nobody", 0)
        # the pool's worker is connecting (the server is not answering it yet)
        assert await asyncio.to_thread(proxy.extra.wait, _WAIT)
        # never closed: asyncio.run cancels the worker's attempt, and the backend's
        # loop-end watcher closes it

    try:
        with caplog.at_level(logging.WARNING):
            asyncio.run(main())
    finally:
        proxy.close()
        drop_schema(schema)
    assert _warnings(caplog) == []


def test_a_connection_the_server_refuses_is_still_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    require_postgres()
    schema = namespace(tmp_path, "sk_pgq_")
    proxy = _Proxy(forward=2, refuse=True)

    async def main() -> None:
        backend = PostgresBackend(proxy.dsn, schema=schema, min_size=2, connect_timeout=_WAIT)
        try:
            await backend.open()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _WAIT
            while not any("error connecting in" in w for w in _warnings(caplog)):
                assert loop.time() < deadline, caplog.records
                await asyncio.sleep(0.01)  # (a condition: the pool tried its second)
        finally:
            await backend.close()

    try:
        with caplog.at_level(logging.WARNING):
            asyncio.run(main())
    finally:
        proxy.close()
        drop_schema(schema)
    failed = [w for w in _warnings(caplog) if "error connecting in" in w]
    assert failed and all(f"statekeeper-{schema}" in w for w in failed)
    assert all(not w.endswith(": ") for w in failed)  # with the reason


def test_only_a_cancelled_task_of_statekeepers_own_pools_is_not_logged() -> None:
    """psycopg_pool's two records of a maintenance task that raised: dropped only for
    a cancellation in a pool of this package, kept for a failure or another's pool."""
    from psycopg_pool import AsyncConnectionPool
    from psycopg_pool.pool_async import AddConnection

    from statekeeper.backends.postgres.loop_end import _CancelledIsNoFailure

    ours = AsyncConnectionPool("", name="statekeeper-s1", open=False)
    theirs = AsyncConnectionPool("", name="app-pool", open=False)
    cancelled, failed = asyncio.CancelledError(), OSError("connection refused")

    def kept(msg: str, *args: object) -> bool:
        record = logging.LogRecord("psycopg.pool", logging.WARNING, "", 0, msg, args, None)
        return _CancelledIsNoFailure().filter(record)

    connecting = "error connecting in %r: %s"
    assert not kept(connecting, ours.name, cancelled)
    assert kept(connecting, ours.name, failed)
    assert kept(connecting, theirs.name, cancelled)
    task_run = "task run %s failed: %s: %s"
    assert not kept(task_run, AddConnection(ours), "CancelledError", cancelled)
    assert kept(task_run, AddConnection(ours), "OSError", failed)
    assert kept(task_run, AddConnection(theirs), "CancelledError", cancelled)
    assert kept("pool %r is already closed", ours.name)
