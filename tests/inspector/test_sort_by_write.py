"""The agents list sorted by last write (issue 18 item 1): newest first or longest
idle first, keyset pages over the last-write index (cursor: last write and id),
combined with the filters; an engine without the index says so."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from .seed import HOSTILE_ID
from .test_routes import ids_on


def _next(html: str) -> str | None:
    found = re.search(r'<a rel="next" href="([^"]*)"', html)
    return unescape(found[1]) if found else None


def _walk(client: Any, url: str) -> list[str]:
    seen: list[str] = []
    next_url: str | None = url
    while next_url is not None:
        html = client.get(next_url).text
        seen += ids_on(html)
        next_url = _next(html)
        assert len(seen) <= 40, "pages repeat"
    return seen


def _agents(ids: list[str]) -> list[str]:
    """Without the LangGraph thread's records (written last by the seed)."""
    return [i for i in ids if not i.startswith("lg/")]


SEEDED = [HOSTILE_ID, "order-7", "tenant/beta", "tenant/alpha"] + [
    f"agent-{i:03d}" for i in range(29, -1, -1)
]  # newest write first: agent-000..029, tenants, order-7, the hostile id last


def test_newest_write_first_pages_through_every_agent_once(client: Any) -> None:
    html = client.get("/agents?sort=recent&limit=40").text
    assert _agents(ids_on(html)) == SEEDED
    first = client.get("/agents?sort=recent&limit=5").text
    nxt = _next(first)
    assert nxt is not None and "sort=recent" in nxt and "at=" in nxt
    every = _walk(client, "/agents?sort=recent&limit=7")
    assert len(every) == len(set(every)) and _agents(every) == SEEDED
    assert _walk(client, "/agents?sort=idle&limit=6") == every[::-1]
    assert ids_on(client.get(nxt).text) == every[5:10]
    assert 'value="recent" selected' in html


def test_sort_by_write_with_filters(client: Any) -> None:
    assert ids_on(client.get("/agents?sort=recent&ns=tenant").text) == [
        "tenant/beta",
        "tenant/alpha",
    ]
    completed = ids_on(client.get("/agents?sort=recent&state=completed&limit=3").text)
    assert completed == ["agent-028", "agent-026", "agent-024"]
    assert ids_on(client.get("/agents?sort=idle&q=agent-00&limit=3").text) == [
        "agent-000",
        "agent-001",
        "agent-002",
    ]
    for bad in ("sort=recent&after=agent-003", "sort=recent&after=agent-003&at=x",
                "sort=recent&before=agent-003", "sort=sideways"):  # fmt: skip
        assert client.get(f"/agents?{bad}").status_code == 400, bad


def test_an_engine_without_the_index_says_so() -> None:
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.backends.memory import MemoryBackend
    from statekeeper.inspector import InspectorSettings, create_app

    class Unindexed(MemoryBackend):
        lists_by_write = False

    token = "t" * 24
    store = StateStore(Unindexed())
    settings = InspectorSettings(url="memory://", token=token)
    with TestClient(create_app(settings, store=store), base_url="http://127.0.0.1") as c:
        c.headers["Authorization"] = f"Bearer {token}"
        r = c.get("/agents?sort=recent")
        assert r.status_code == 400 and "last write" in r.text
        assert 'value="recent"' not in c.get("/agents").text
