"""The live view's verdict on what an open agent page shows: ``head`` when the stream
only grew (the page appends the new events), ``rewritten`` when anything the page shows
changed under it (it reloads) — also when the stream grew in the same poll interval."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from statekeeper import StateStore
from statekeeper.inspector.live import head_events, head_version
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from tests.schema import apps


async def _never() -> bool:
    return False


async def _next_verdict(events: AsyncIterator[bytes]) -> str:
    """The next ``event:`` name (``idle`` for a keep-alive)."""
    while True:
        chunk = (await events.__anext__()).decode()
        if chunk.startswith("event: "):
            return chunk.split("\n", 1)[0].removeprefix("event: ")
        if chunk.startswith(": idle"):
            return "idle"


async def _page_open_on(store: StateStore, agent_id: str) -> AsyncIterator[bytes]:
    seq, version = await head_version(store, agent_id)
    events = head_events(store, agent_id, seq, version, 0.0, _never)
    assert await _next_verdict(events) == "idle"  # the page is current
    return events


async def test_a_new_event_alone_is_a_head_move() -> None:
    async with StateStore("memory://") as store:
        await store.save("a", {"n": 1})
        events = await _page_open_on(store, "a")
        await store.save("a", {"n": 2})
        assert await _next_verdict(events) == "head"
        assert await _next_verdict(events) == "idle"


async def test_a_migration_followed_by_a_write_reloads_the_page() -> None:
    # a running agent writes right after the migration rewrote its head (the usual case
    # when a schema changes under live agents): the page showed the pre-migration record
    # at seq 1 and kept it, only adding seq 2 (the docs: a rewrite in place reloads)
    async with StateStore("memory://") as store:
        await TypedStates(store, apps.support_v1).create("t", apps.SupportV1(customer_name="A"))
        events = await _page_open_on(store, "t")
        assert (await migrate(store, apps.support_v2)).changed == 1
        agent = await store.agent("t", model=apps.support_v2)
        agent.state.escalated = True
        await agent.save()
        assert await _next_verdict(events) == "rewritten"


async def test_an_agent_deleted_and_written_again_reloads_the_page() -> None:
    # another stream under the same id, longer than the one shown: its first events are
    # not the ones the page shows
    async with StateStore("memory://") as store:
        await store.save("a", {"who": "first"})
        events = await _page_open_on(store, "a")
        await store.delete("a")
        for n in range(3):
            await store.save("a", {"who": "second", "n": n})
        assert await _next_verdict(events) == "rewritten"


async def _first_verdict(app: Any, path: str) -> str:
    """The first verdict the app's live stream at ``path`` sends (then the client
    goes away), driven as a browser's EventSource would be."""
    from .conftest import TOKEN

    chunks: list[bytes] = []
    seen = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await seen.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if b"event: " in b"".join(chunks) or b": idle" in b"".join(chunks):
                seen.set()

    url = urlsplit(path)
    scope = {
        "type": "http",
        "method": "GET",
        "path": url.path,
        "raw_path": url.path.encode(),
        "query_string": url.query.encode(),
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "http_version": "1.1",
        "root_path": "",
    }
    await app(scope, receive, send)
    text = b"".join(chunks).decode()
    found = re.search(r"^event: (\w+)$", text, re.MULTILINE)
    return found.group(1) if found else "idle"


def test_a_page_whose_record_was_rewritten_before_its_stream_started_reloads() -> None:
    """The page is rendered; a migration rewrites the head it shows and the agent writes
    on before the page's live stream starts (its first look, or its reconnect after
    the inspector restarted): the stream only saw the head move and the page kept the
    pre-migration record, appending the new event under it."""
    from starlette.testclient import TestClient

    from statekeeper.inspector import InspectorSettings, create_app

    from .conftest import TOKEN

    store = StateStore("memory://")
    app = create_app(InspectorSettings(url="memory://", token=TOKEN), store=store)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        portal = client.portal
        assert portal is not None

        async def create() -> None:
            await TypedStates(store, apps.support_v1).create("t", apps.SupportV1(customer_name="A"))

        portal.call(create)
        found = re.search(r'data-live-url="([^"]+)"', client.get("/agent?id=t").text)
        assert found is not None
        live = html.unescape(found.group(1))
        assert portal.call(_first_verdict, app, live) == "idle"  # current

        async def migrate_and_write() -> None:
            assert (await migrate(store, apps.support_v2)).changed == 1
            agent = await store.agent("t", model=apps.support_v2)
            agent.state.escalated = True
            await agent.save()

        portal.call(migrate_and_write)
        assert portal.call(_first_verdict, app, live) == "rewritten"
