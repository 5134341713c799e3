"""A PostgreSQL backup cancelled while the server is slow to take the cancel request:
the event loop keeps serving every other task meanwhile.

The copy's stop asks the server to cancel its ``COPY`` (``PQcancel``: a connection of
its own, answered once the server has acted). It ran on the event loop: with a server
that accepts the request and does not answer (overloaded, frozen, a dead link behind
a proxy) every other task of the process stood still, for ever. Now the request is
sent from a thread of its own, bounded (``cancel_safe``). The slow server here is a TCP
proxy the test runs in front of the shared server: once "frozen", the connections it
accepts are never forwarded nor answered (the shared server itself is untouched)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from statekeeper import StateStore

from ..backends._services import fresh_url
from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)
_SERVED = 20  # (the same: a free loop runs a callback at its next turn)


class _Proxy:
    """Forwards TCP connections to ``upstream``; :meth:`freeze`: the new ones are
    accepted and held silent (:attr:`arrived` set), :meth:`thaw` closes those."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen = False
        self.arrived = threading.Event()
        self.held: list[socket.socket] = []
        self.open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # (closed)
            with self._lock:
                if self.frozen:
                    self.held.append(client)
                    self.arrived.set()
                    continue
                server = socket.create_connection(self.upstream)
                self.open += [client, server]
            pump = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            self._threads.append(pump)
            pump.start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                ready, _, _ = select.select([a, b], [], [])
                for side in ready:
                    data = side.recv(65536)
                    if not data:
                        return
                    (b if side is a else a).sendall(data)

    def freeze(self) -> None:
        with self._lock:
            self.frozen = True

    def thaw(self) -> None:
        with self._lock:
            self.frozen = False
            held, self.held = self.held, []
        for conn in held:
            conn.close()

    def close(self) -> None:
        self.thaw()
        self.listener.close()
        with self._lock:
            for conn in self.open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[str, _Proxy]]:
    with fresh_url("postgresql", tmp_path) as url:
        parts = urlsplit(url)
        proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
        user = f"{parts.username}@" if parts.username else ""
        netloc = f"{user}127.0.0.1:{proxy.port}"
        try:
            yield urlunsplit(parts._replace(netloc=netloc)), proxy
        finally:
            proxy.close()


async def test_the_loop_serves_other_tasks_while_the_cancel_waits_for_the_server(
    proxied: tuple[str, _Proxy],
) -> None:
    url, proxy = proxied
    inside, release = threading.Event(), threading.Event()
    served: list[bool] = []

    def write(piece: bytes) -> None:  # (the copy's thread, mid-COPY)
        if not inside.is_set():
            inside.set()
            assert release.wait(_WAIT)

    async with StateStore(url, keyring=keyring()) as src:
        for i in range(5):
            await src.save(f"a{i}", {"i": i, "pad": os.urandom(200).hex()})
        loop = asyncio.get_running_loop()

        def watch() -> None:
            """Once the cancel request reached the frozen server: does the loop run a
            callback? Then the server is let go, and the copy."""
            try:
                assert proxy.arrived.wait(_WAIT)
                beat = threading.Event()
                loop.call_soon_threadsafe(beat.set)
                served.append(beat.wait(_SERVED))
            finally:
                proxy.thaw()
                release.set()

        task = asyncio.ensure_future(src.backend.copy_out("", write))  # type: ignore[attr-defined]
        assert await asyncio.to_thread(inside.wait, _WAIT)
        proxy.freeze()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(watcher.join, _WAIT)
        assert served == [True], "the loop stood still while the cancel waited for the server"
        await src.save("after", {"ok": True})  # the pool untouched
        assert (await src.load("after")).data == {"ok": True}
