"""End to end in headless Chromium (the distribution's, driven by Playwright): load every
page on a seeded store, click agent -> event -> time travel -> diff, watch an event
arrive live, check what is shown, that nothing logs an error (CSP violations included),
that hostile ids and data stay inert, and that pages fit a 390-pixel phone screen.
Screenshots go to ``$STATEKEEPER_ARTIFACTS/inspector`` (default ``.artifacts/``), and
with ``STATEKEEPER_UPDATE_DOCS=1`` also to ``docs/images/`` for docs/inspector.md."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from .conftest import ARTIFACTS, TOKEN, LiveServer, in_thread
from .seed import HOSTILE_ID

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("STATEKEEPER_UPDATE_DOCS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMAGES / f"inspector-{name}.png")


class Watched:
    """A page whose console errors and uncaught exceptions are collected."""

    def __init__(self, browser: Any, base: str, viewport: dict[str, int]) -> None:
        self.context = browser.new_context(viewport=viewport, base_url=base)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on(
            "console",
            lambda msg: (
                self.errors.append(f"console: {msg.text} at {msg.location}")
                if msg.type == "error"
                else None
            ),
        )
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        self.page.set_default_timeout(20_000)

    def login(self, path: str = "/agents") -> Any:
        sep = "&" if "?" in path else "?"
        self.page.goto(f"{path}{sep}token={TOKEN}")
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def server(store_copy: str) -> Iterator[LiveServer]:
    with LiveServer(store_copy) as live:
        live.url = store_copy  # type: ignore[attr-defined]
        yield live


@pytest.fixture
def desktop(chromium: Any, server: LiveServer) -> Iterator[Watched]:
    watched = Watched(chromium, server.base, DESKTOP)
    yield watched
    watched.close()
    assert watched.errors == []


def test_agent_event_time_travel_diff(desktop: Watched) -> None:
    from playwright.sync_api import expect

    page = desktop.login("/agents")
    assert page.url.endswith("/agents")  # the token left the address bar
    expect(page.locator("#agents tbody tr")).to_have_count(35)
    shot(page, "agents")
    page.get_by_role("link", name="agent-003", exact=True).click()
    expect(page.locator("h1")).to_have_text("agent-003")
    expect(page.locator("#current-state")).to_have_text("processing")
    expect(page.locator('svg.machine g.state.current[data-state="processing"]')).to_be_visible()
    shot(page, "agent")
    page.locator("svg.machine").scroll_into_view_if_needed()
    shot(page, "machine")
    # an event: its JSON Patch against the state before it
    page.locator('tr.event[data-seq="3"] a.seq-link').click()
    detail = page.locator("#event-detail .event-detail")
    expect(detail.locator("h3")).to_contain_text("Event 3")
    expect(detail.locator("table.changes tr.op-add td.path")).to_have_text("/tool")
    # time travel to it
    detail.get_by_role("button", name="Show the state at seq 3").click()
    expect(page.locator("#state .state-at")).to_have_attribute("data-seq", "3")
    expect(page.locator("#state")).to_contain_text("time travel: the head is 4")
    expect(page.locator("#seq-shown")).to_have_text("3")
    # the slider too
    page.locator("#seq-slider").fill("1")
    expect(page.locator("#state .state-at")).to_have_attribute("data-seq", "1")
    expect(page.locator("#state")).to_contain_text("idle")
    # and a diff between two seqs
    page.locator('tr.event[data-seq="4"] a.seq-link').click()
    expect(detail.locator("h3")).to_contain_text("Event 4")
    detail.get_by_role("button", name="Diff 3 → 4").click()
    expect(page.locator("#diff-result")).to_contain_text("seq 3 → seq 4")
    expect(page.locator("#diff-result tr.op-add td.path")).to_have_text("/data/tool/result")
    page.locator("#diff-a").fill("1")
    page.locator("#diff-b").fill("4")
    page.locator("#diff-button").click()
    expect(page.locator("#diff-result")).to_contain_text("seq 1 → seq 4")
    page.locator("#diff-result").scroll_into_view_if_needed()
    shot(page, "diff")
    # verification on demand, and the keys panel loaded by itself
    page.locator("#verify-button").click()
    expect(page.locator("#verify-result")).to_contain_text("Verified.")
    expect(page.locator("#keys")).to_contain_text("No durable steps recorded")


def test_live_updates_without_reload(desktop: Watched, server: LiveServer) -> None:
    from playwright.sync_api import expect

    from statekeeper import StateStore

    page = desktop.login("/agent?id=agent-001")
    expect(page.locator("#live-status")).to_have_class("live on")
    page.evaluate("window.__marker = 'same page'")

    async def write() -> None:
        async with StateStore(server.url) as store:  # type: ignore[attr-defined]
            await store.save(
                "agent-001", {"task": "task 1", "live": "arrived"}, actor="live-writer"
            )

    in_thread(write)
    expect(page.locator('tr.event[data-seq="3"]')).to_contain_text("live-writer")
    expect(page.locator("#head-seq")).to_have_text("3")
    # the slider followed the head and the state shows the new data
    expect(page.locator("#state .state-at")).to_have_attribute("data-seq", "3")
    expect(page.locator("#state")).to_contain_text("arrived")
    assert page.evaluate("window.__marker") == "same page"  # no reload happened


def test_a_burst_of_live_events_is_shown_whole_and_once(
    desktop: Watched, server: LiveServer
) -> None:
    """More events than a timeline page between two looks of the live view: the page
    showed the oldest page of them and skipped the rest for good, and rows written
    between the announcement and the page's request were shown twice."""
    from playwright.sync_api import expect

    from statekeeper import StateStore

    page = desktop.login("/agent?id=agent-001")
    expect(page.locator("#live-status")).to_have_class("live on")

    async def burst() -> None:
        async with StateStore(server.url) as store:  # type: ignore[attr-defined]
            for n in range(70):
                await store.save("agent-001", {"task": "task 1", "n": n})

    in_thread(burst)
    expect(page.locator("#head-seq")).to_have_text("72")
    expect(page.locator('tr.event[data-seq="72"]')).to_have_count(1)
    rows, gaps = page.locator("tr.event"), page.locator("tr.gap button")
    while gaps.count():  # however the burst was split between looks
        shown = rows.count()
        gaps.first.click()
        expect(rows).not_to_have_count(shown)
    seqs = [int(s) for s in rows.evaluate_all("rows => rows.map(r => r.dataset.seq)")]
    assert seqs == list(range(72, 0, -1))


def test_live_view_reloads_after_a_rewrite_in_place(desktop: Watched, server: LiveServer) -> None:
    """A migration rewrites an agent's records in place: the same seqs, other data. The
    live view only watched the head seq, so the open page kept showing the old data; it
    notices the head changed without a new seq, reloads and says so."""
    from playwright.sync_api import expect

    from statekeeper import StateStore
    from statekeeper.schema import TypedStates
    from statekeeper.schema.migrate import migrate
    from tests.schema import apps

    async def create() -> None:
        async with StateStore(server.url) as store:  # type: ignore[attr-defined]
            states = TypedStates(store, apps.support_v1)
            await states.create("typed-1", apps.SupportV1(customer_name="Ada"))

    in_thread(create)
    page = desktop.login("/agent?id=typed-1")
    expect(page.locator("#live-status")).to_have_class("live on")
    expect(page.locator("#state")).to_contain_text("customer_name")

    async def rewrite() -> None:
        async with StateStore(server.url) as store:  # type: ignore[attr-defined]
            report = await migrate(store, apps.support_v2)
            assert report.changed == 1 and await store.head("typed-1") == 1  # no new seq

    in_thread(rewrite)
    expect(page.locator("#rewritten-note")).to_contain_text("rewritten in place")
    expect(page.locator("#state")).not_to_contain_text("customer_name")
    expect(page.locator("#state")).to_contain_text("escalated")
    # a reload by hand does not say it again: the page drops the flag from its address once
    # loaded (a wait for that, not a read of the address at one instant: the check raced it)
    expect(page).not_to_have_url(re.compile("rewritten"))
    expect(page.locator("#live-status")).to_have_class("live on")  # and it goes on


def test_hostile_content_stays_inert(desktop: Watched) -> None:
    from playwright.sync_api import expect

    page = desktop.login("/agents")
    expect(page.locator("#agents")).to_contain_text("<script>window.__pwned=1</script>")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.goto("/agent?" + urlencode({"id": HOSTILE_ID}))
    expect(page.locator("h1")).to_have_text(HOSTILE_ID)
    page.locator('tr.event[data-seq="2"] a.seq-link').click()
    expect(page.locator("#event-detail")).to_contain_text("</pre><script>window.__pwned=3")
    page.locator("#verify-button").click()
    expect(page.locator("#verify-result")).to_contain_text("Verified.")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("img").count() == 0


def test_thread_tree_and_chat(desktop: Watched) -> None:
    from playwright.sync_api import expect

    page = desktop.login("/threads")
    page.get_by_role("link", name="chat-1").click()
    expect(page.locator("#cp-tree li.cp")).to_have_count(4)
    expect(page.locator("#cp-tree li.fork")).to_contain_text("fork: 2 branches")
    page.locator('#cp-tree li[data-checkpoint$="0002"] a').click()
    expect(page.locator("#chat li.msg")).to_have_count(3)
    expect(page.locator("#chat li.msg").first).to_contain_text("What is <b>2+2</b>?")
    shot(page, "thread")
    page.goto("/store")
    expect(page.locator("#health")).to_have_text("healthy")
    page.get_by_role("button", name="Count").click()
    expect(page.locator("#count")).to_contain_text("35 agents")
    # the report loads by itself: health, the transition matrix heat map, entropy, metrics
    expect(page.locator("#transition-matrix td.heat-10").first).to_be_visible()
    expect(page.locator("#transition-matrix")).to_contain_text("tool_call")
    expect(page.locator("#entropy-chart rect.bar").first).to_be_attached()
    expect(page.locator("#metrics")).to_contain_text("statekeeper_agents_in_state")
    page.locator("#transition-matrix").scroll_into_view_if_needed()
    shot(page, "store")
    page.locator('input[name="scope"]').fill("5")
    page.get_by_role("button", name="Analyse").click()
    expect(page.locator("#analysis-scope")).to_contain_text("the first 5 in id order")


def test_pages_fit_a_phone(chromium: Any, server: LiveServer) -> None:
    from playwright.sync_api import expect

    phone = Watched(chromium, server.base, PHONE)
    try:
        page = phone.login("/agents")
        for path, name in (
            ("/agents", "phone-agents"),
            ("/agent?id=agent-003", "phone-agent"),
            ("/thread?id=chat-1", None),
            ("/store", None),
        ):
            page.goto(path)
            expect(page.locator("main h1")).to_be_visible()
            if path == "/store":  # the report (a wide table) has loaded
                expect(page.locator("#transition-matrix")).to_be_visible()
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} is {overflow}px wider than a 390px screen"
            if name:
                shot(page, name)
        page.goto("/agent?id=agent-003")
        page.locator('tr.event[data-seq="4"] a.seq-link').click()
        expect(page.locator("#event-detail h3")).to_contain_text("Event 4")
    finally:
        phone.close()
    assert phone.errors == []
