"""In headless Chromium: the agent page's *Delete* form follows the live view. An event
arriving while the page is open moves the head the form sends to the one the page now
shows, so the delete goes through (the user saw that event); a write the page has not
shown yet is not deleted (409, the page says so and links back to the agent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import LiveServer, in_thread
from .test_browser import DESKTOP, Watched


@pytest.fixture
def writable(store_copy: str) -> Iterator[LiveServer]:
    with LiveServer(store_copy, allow_writes=True) as live:
        live.url = store_copy  # type: ignore[attr-defined]
        yield live


@pytest.fixture
def desktop(chromium: Any, writable: LiveServer) -> Iterator[Watched]:
    watched = Watched(chromium, writable.base, DESKTOP)
    yield watched
    watched.close()


def _write(url: str, agent_id: str) -> None:
    from statekeeper import StateStore

    async def write() -> None:
        async with StateStore(url) as store:
            await store.save(agent_id, {"task": "late", "live": "arrived"}, actor="live-writer")

    in_thread(write)


def test_the_form_follows_the_live_head_and_deletes(desktop: Watched, writable: LiveServer) -> None:
    from playwright.sync_api import expect

    page = desktop.login("/agent?id=agent-001")
    expect(page.locator("#live-status")).to_have_class("live on")
    expect(page.locator("#delete-head")).to_have_value("2")
    shown_mark = page.locator("#delete-mark").input_value()
    _write(writable.url, "agent-001")  # type: ignore[attr-defined]
    expect(page.locator("#head-seq")).to_have_text("3")  # the page shows it
    expect(page.locator("#delete-head")).to_have_value("3")  # and the form follows
    assert page.locator("#delete-mark").input_value() not in ("", shown_mark)
    page.locator('input[name="confirm"]').fill("agent-001")
    page.locator("button.danger").click()
    expect(page.locator("h1")).to_have_text("Deleted")
    assert desktop.errors == []


def test_a_write_the_page_has_not_shown_is_not_deleted(
    desktop: Watched, writable: LiveServer
) -> None:
    from playwright.sync_api import expect

    # a page that does not follow (its live stream refused: a proxy that buffers it)
    desktop.page.route("**/agent/live*", lambda route: route.abort())
    page = desktop.login("/agent?id=agent-002")
    shown = page.locator("#head-seq").inner_text()
    expect(page.locator("#delete-head")).to_have_value(shown)
    _write(writable.url, "agent-002")  # type: ignore[attr-defined]
    page.locator('input[name="confirm"]').fill("agent-002")
    page.locator("button.danger").click()
    expect(page.locator("#not-deleted")).to_contain_text("written since it was shown")
    page.locator("#look-again").click()
    expect(page.locator("#head-seq")).to_have_text(str(int(shown) + 1))  # kept, the write too
