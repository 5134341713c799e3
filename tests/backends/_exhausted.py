"""A private PostgreSQL server out of connections, and child processes run against it
that must exit (the helpers of the loop-end tests: tests/backends/test_postgres_exit.py,
tests/integrations/test_langgraph_pg_exit.py).

:class:`Exhausted` starts its own server (:func:`._services.private_postgres`) with a
handful of connection slots and holds every slot the child does not: a child's pool
that loses its connections cannot make new ones ("too many clients already") until
the test frees a slot. :func:`run_child` runs a child with a generous bound; a child
that does not exit by then fails the test with its threads' and tasks' stacks.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

from ._services import PrivatePostgres, private_postgres

SRC = Path(__file__).resolve().parents[2] / "src"

#: the ``application_name`` of the children's connections (how the test finds them)
CHILD_APP = "sk-exit-child"

#: how long a child may take to exit before the test fails with its stacks: minutes,
#: where a child that works takes seconds (a hang is what is caught, not slowness)
BOUND = 100.0

#: the start of every child: on SIGUSR1 it prints its threads' and its loop's tasks'
#: stacks (a child that hangs is asked for them before it is killed)
PRELUDE = """
import asyncio, faulthandler, signal, sys
sys.path.insert(0, {src!r})
LOOPS = []
def _tasks(*_):
    for loop in LOOPS:
        for task in asyncio.all_tasks(loop):
            print("task", task, file=sys.stderr)
            task.print_stack(file=sys.stderr)
    sys.stderr.flush()
signal.signal(signal.SIGUSR1, _tasks)
faulthandler.register(signal.SIGUSR1, chain=True)
KEPT = []
async def say_ending():
    # cancelled by asyncio.run's end with the store's tasks: the loop is ending
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        print("ending", flush=True)
        raise
"""


class Exhausted:
    """A private server whose every free connection slot is held by the test."""

    def __init__(self, server: PrivatePostgres) -> None:
        import psycopg

        self.server = server
        self._psycopg = psycopg
        self.held: list[Any] = []
        self.admin = psycopg.connect(server.dsn, autocommit=True)

    def url(self, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"application_name": CHILD_APP, **options}.items())
        return f"{self.server.dsn}?{query}"

    def _fill(self) -> None:
        psycopg = self._psycopg
        while True:
            try:
                self.held.append(psycopg.connect(self.server.dsn, autocommit=True))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc), exc
                return

    def take_all(self) -> None:
        """End the child's connections and hold every slot: the child's pool cannot
        make a new one (the server refuses it) until :meth:`free_one`."""
        while True:
            self.admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (CHILD_APP,),
            )
            self._fill()
            row = self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (CHILD_APP,),
            ).fetchone()
            if row is not None and row[0] == 0:
                return

    def slow_connections(self, seconds: int) -> None:
        """Make every new connection take ``seconds`` before the server answers, even
        with a refusal (``pre_auth_delay``): a connection attempt stays in progress."""
        self.admin.execute(f"ALTER SYSTEM SET pre_auth_delay = {int(seconds)}")
        self.admin.execute("SELECT pg_reload_conf()")

    def free_one(self) -> None:
        self.held.pop().close()

    def release(self) -> None:
        self.admin.execute("ALTER SYSTEM RESET pre_auth_delay")
        self.admin.execute("SELECT pg_reload_conf()")
        for conn in self.held:
            conn.close()
        self.held.clear()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.release()
        with contextlib.suppress(Exception):
            self.admin.close()


@contextlib.contextmanager
def exhausted_server() -> Iterator[Exhausted]:
    """A private server with 6 connection slots (runs only where the PostgreSQL
    binaries are: skips otherwise, as :class:`._services.PrivatePostgres` does)."""
    with private_postgres({"max_connections": 6}) as server:
        held = Exhausted(server)
        try:
            yield held
        finally:
            held.close()


class Child:
    """A child process run from ``code`` (after :data:`PRELUDE`), talked to by lines."""

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE.format(src=str(SRC)) + code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self._lines.put)),
            threading.Thread(target=self._read, args=(self.proc.stderr, self._err.append)),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, put: Callable[[str], None]) -> None:
        assert stream is not None
        for line in stream:
            put(line)
        put("")  # (the end)

    def expect(self, line: str) -> None:
        """Wait for the child to print ``line`` (within :data:`BOUND` seconds, else the
        test fails with the child's stacks)."""
        try:
            got = self._lines.get(timeout=BOUND)
        except queue.Empty:
            self._fail(f"the child did not print {line!r} within {BOUND:g}s")
        if got.strip() != line:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"the child printed {got!r}, not {line!r}; its stderr:\n{self.stderr}")

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def say(self, line: str = "go") -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(line + "\n")
        stdin.flush()

    def exit(self) -> tuple[int, str, str]:
        """Wait for the child to exit (at most :data:`BOUND` seconds, else fail with its
        stacks); its exit code, the rest of its stdout, its stderr."""
        try:
            code = self.proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            self._fail(f"the child did not exit within {BOUND:g}s")
        for reader in self._readers:  # (its pipes are closed: they end)
            reader.join()
        out = []
        while (line := self._lines.get_nowait()) != "":
            out.append(line)
        return code, "".join(out), self.stderr

    def _fail(self, what: str) -> NoReturn:
        os.kill(self.proc.pid, signal.SIGUSR1)  # it prints its stacks, then it is killed
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.proc.kill()
        self.proc.wait()
        for reader in self._readers:
            reader.join()
        pytest.fail(f"{what}; its stacks:\n{self.stderr[-20000:]}")
