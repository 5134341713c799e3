"""Fixtures of the inspector's tests: a seeded SQLite store, an app on it, a real
server in a thread, and headless Chromium driven by Playwright."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeClock, require_service

from .seed import T0, seed, seed_thread

TOKEN = "test-token-0123456789abcdef"
CHROMIUM = os.environ.get("STATEKEEPER_CHROMIUM", "/usr/bin/chromium")
#: where browser tests put screenshots (CI artefacts)
ARTIFACTS = Path(os.environ.get("STATEKEEPER_ARTIFACTS", ".artifacts")) / "inspector"


@pytest.fixture(scope="session")
def seeded_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    from statekeeper import StateStore

    path = tmp_path_factory.mktemp("inspector") / "store.db"
    url = f"sqlite:///{path}"

    async def build() -> None:
        async with StateStore(url, clock=FakeClock(T0, step=1.0), snapshot_every=3) as store:
            await seed(store)

    in_thread(build)
    seed_thread(url)
    return url


def in_thread(fn: Any) -> Any:
    """Run the coroutine function ``fn`` to completion on a thread of its own (the
    Playwright driver may be running an event loop on this one)."""
    result: list[Any] = []
    failure: list[BaseException] = []

    def main() -> None:
        try:
            result.append(asyncio.run(fn()))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


@pytest.fixture
def store_copy(seeded_url: str, tmp_path: Path) -> str:
    """A private copy of the seeded store (for tests that write or damage it)."""
    src = Path(seeded_url.removeprefix("sqlite:///"))
    dst = tmp_path / "copy.db"
    shutil.copy(src, dst)
    return f"sqlite:///{dst}"


def make_client(url: str, **options: Any) -> Any:
    from starlette.testclient import TestClient

    from statekeeper.inspector import InspectorSettings, create_app

    settings = InspectorSettings(url=url, token=TOKEN, **options)
    client = TestClient(create_app(settings), base_url="http://127.0.0.1")
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client


@pytest.fixture
def client(seeded_url: str) -> Iterator[Any]:
    with make_client(seeded_url) as c:
        yield c


class LiveServer:
    """uvicorn serving the inspector in a thread, on a free port."""

    def __init__(self, url: str, **options: Any) -> None:
        import uvicorn

        from statekeeper.inspector import InspectorSettings, create_app

        settings = InspectorSettings(url=url, token=TOKEN, live_interval=0.1, **options)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        ready = threading.Event()
        # wait for the condition (uvicorn says it started), not for a duration
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the inspector server did not start")
            ready.wait(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Playwright's Chromium driver on the distribution's browser (never a download).

    Module scope, not session: while Playwright's sync API is open it marks its
    asyncio loop as running in this thread, so every later test that calls
    ``asyncio.run`` would fail (the first full CI run failed that way). Closing it
    at the end of the browser module clears that."""
    require_service(
        "Chromium", Path(CHROMIUM).exists(), f"{CHROMIUM} is missing (apt-get install chromium)"
    )
    from playwright.sync_api import expect, sync_playwright

    # expect()'s own bound (5 s by default, apart from the page's 20 s action timeout):
    # every assertion waits for its condition, and on a loaded 2-core machine a page can
    # take longer than 5 s to show it — a generous bound, not a duration waited for
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(autouse=True)
def _no_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages stop filtering after TIME_BUDGET seconds; on a loaded machine that would
    make results depend on timing, so tests run with the row budgets only."""
    from statekeeper.inspector import listing

    monkeypatch.setattr(listing, "TIME_BUDGET", float("inf"))
