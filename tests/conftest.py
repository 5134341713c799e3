"""Shared test configuration.

Shared fixtures (one of each for the whole suite): :class:`FakeClock` and ``clock``;
``url`` (each test on both shipped engines), ``db_url`` (a SQLite file several stores
or processes share), ``open_store`` (stores closed at the end) and ``store``.

Tests that need a server (PostgreSQL, Redis, S3) call :func:`require_service`, which
skips with a clear reason when the server is not reachable — unless
``STATEKEEPER_REQUIRE_SERVICES=1`` (set by ``.ci/run``), which turns that skip into a
failure so CI always exercises them.

Test files live in memory when the machine has room for them (:func:`pytest_configure`),
and typer's test runner reuses the CLI's cached click command tree
(:func:`build_cli_once`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from statekeeper import StateStore
from statekeeper.errors import WriteBufferError

# Hypothesis's default 200 ms deadline per example is a timing assertion: on a loaded
# 2-core machine an example of a correct test can take longer (seen:
# tests/concurrency/test_orset_tags.py beside eight workers). Every property test runs
# without it; what they assert is behaviour, never speed.
settings.register_profile("statekeeper", deadline=None)
settings.load_profile("statekeeper")

REQUIRE_SERVICES = os.environ.get("STATEKEEPER_REQUIRE_SERVICES") == "1"

#: /dev/shm must have this much free room for the test files to go there
MEMORY_TEMP_ROOM = 4 << 30


def memory_temp_root(shm: Path = Path("/dev/shm")) -> Path | None:
    """A memory file system (tmpfs) for the run's temporary files, or None.

    The suite writes about a gigabyte of SQLite files and fsyncs them, and no test in
    the default run is about power loss (a SIGKILLed process loses nothing the kernel
    holds, on tmpfs as on a disk): on a disk, the workers sat waiting for fsync. None
    when there is no writable /dev/shm with :data:`MEMORY_TEMP_ROOM` free (a container's
    64 MB default would fill up), when ``STATEKEEPER_TESTS_ON_DISK=1``, or when the
    user chose a place (``PYTEST_DEBUG_TEMPROOT``; ``--basetemp`` is checked by the
    caller)."""
    if os.environ.get("STATEKEEPER_TESTS_ON_DISK") == "1" or os.environ.get(
        "PYTEST_DEBUG_TEMPROOT"
    ):
        return None
    try:
        room = os.statvfs(shm)
    except OSError:
        return None
    if room.f_bavail * room.f_frsize < MEMORY_TEMP_ROOM or not os.access(shm, os.W_OK):
        return None
    return shm


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Put pytest's numbered temporary folders (``tmp_path``, ``tmp_path_factory``)
    under /dev/shm when :func:`memory_temp_root` allows it; pytest keeps its usual
    retention (the last 3 runs) there. xdist workers get the controller's folder."""
    build_cli_once()
    if config.option.basetemp is not None or hasattr(config, "workerinput"):
        return
    root = memory_temp_root()
    if root is not None:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(root)


def build_cli_once() -> None:
    """Make typer's ``CliRunner`` run the ``statekeeper`` app on the CLI's own cached
    click command tree (:func:`statekeeper.cli.app.command`) instead of building one
    at every invocation.

    ``CliRunner.invoke(app)`` asks typer for the tree itself (``typer.testing``'s
    ``_get_command``), which rebuilds every option of every loaded command: ~37 ms a
    run on a quiet machine once a test process has loaded every command module
    (0.1-0.2 s at load 10), for a few thousand in-process runs. The console script's
    own entry point (:func:`statekeeper.cli.app.main`) reuses the cached tree without
    help; this hands the same tree to the runner. Other Typer apps (a test's own) are
    built as before."""
    import typer.testing

    build = typer.testing._get_command  # type: ignore[attr-defined]
    if getattr(build, "__sk_cached_tree__", False):
        return

    def get_command(typer_instance: Any) -> Any:
        from statekeeper.cli.app import app, command

        return command() if typer_instance is app else build(typer_instance)

    get_command.__sk_cached_tree__ = True  # type: ignore[attr-defined]
    typer.testing._get_command = get_command  # type: ignore[attr-defined]


def require_service(name: str, reachable: bool, how: str) -> None:
    """Skip (or, in CI, fail) when the service ``name`` is not reachable."""
    if reachable:
        return
    message = f"{name} not reachable: {how}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (STATEKEEPER_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(message)


class FakeClock:
    """A manual clock: returns ``now`` (counting the calls) until ``advance(dt)`` or a
    test sets ``now``; with ``step``, each reading first moves it on by ``step``
    (timestamps that differ by a known amount). Time in tests moves when the test
    says so, never with the machine's speed. The suite's one fake clock."""

    def __init__(self, start: float = 1_000.0, step: float = 0.0) -> None:
        self.now = start
        self.step = step
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        self.now += self.step
        return self.now

    def advance(self, dt: float = 1.0) -> float:
        self.now += dt
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A backend URL: each test using it runs on both shipped engines."""
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A SQLite URL for tests that need a file several stores or processes share."""
    return f"sqlite:///{tmp_path / 'shared.db'}"


@pytest.fixture
async def open_store() -> AsyncIterator[Callable[..., StateStore]]:
    """Factory for stores that are all closed at the end of the test."""
    opened: list[StateStore] = []

    def factory(backend: Any, **options: Any) -> StateStore:
        store = StateStore(backend, **options)
        opened.append(store)
        return store

    yield factory
    for store in reversed(opened):
        # a test may leave a failed write-behind buffer behind on purpose
        with contextlib.suppress(WriteBufferError):
            await store.close()


@pytest.fixture
async def store(url: str, clock: FakeClock, open_store: Callable[..., StateStore]) -> StateStore:
    return open_store(url, clock=clock, snapshot_every=5)
