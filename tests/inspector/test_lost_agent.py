"""The inspector on a Redis store one of whose agents lost its data (its key deleted
behind the store's back, as ``redis-cli DEL`` does: ``AgentLost``). The CLI lists it as
lost and goes on; the inspector answered HTTP 500 on the agents list (every page from
before it), the agent's page, its verify panel and the store's analysis. It lists the
agent marked lost, its page says it is lost and what to do, the analysis counts it.

The shared server, under each test's own key prefix."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import SyncStateStore

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis
from .conftest import make_client


@pytest.fixture
def lost_url(tmp_path: Path) -> Iterator[str]:
    """A store with agents r/a, r/b (lost) and r/c."""
    require_redis()
    prefix = namespace(tmp_path, "sk_lostinsp_") + ":"
    url = f"{REDIS_URL}?prefix={prefix}"
    try:
        with SyncStateStore(url) as store:
            store.save("r/a", {"n": 1})
            store.save("r/b", {"n": 1})
            store.save("r/b", {"n": 2})
            store.save("r/c", {"n": 1})
        client = redis.Redis.from_url(REDIS_URL)
        try:
            assert client.delete(f"{prefix}a:r/b") == 1
        finally:
            client.close()
        yield url
    finally:
        delete_prefix(prefix)


def _rows(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('<a href="/agent?id=')[1:]]


def test_the_list_shows_a_lost_agent_marked_lost_and_the_others(lost_url: str) -> None:
    client: Any
    with make_client(lost_url) as client:
        for query in ("", "?q=r/", "?after=r/a", "?limit=1&after=r/a"):
            page = client.get("/agents" + query)
            assert page.status_code == 200, (query, page.text[:600])
            assert 'class="lost"' in page.text and "r%2Fb" in page.text
        page = client.get("/agents")
        assert _rows(page.text) == ["r%2Fa", "r%2Fb", "r%2Fc"]
        nxt = client.get("/agents?limit=1&after=r/a")
        assert _rows(nxt.text) == ["r%2Fb"] and "after=r%2Fb" in nxt.text  # Next goes on
        assert client.get("/agents?state=nothing").status_code == 200


def test_a_lost_agents_page_says_it_is_lost_and_what_to_do(lost_url: str) -> None:
    client: Any
    with make_client(lost_url, allow_writes=True) as client:
        page = client.get("/agent?id=r/b")
        assert page.status_code == 410, page.text[:600]
        assert "lost its stored data" in page.text and "statekeeper delete" in page.text
        assert 'action="/agent/delete"' in page.text  # acknowledging is one form away
        verify = client.get("/agent/verify?id=r/b", headers={"HX-Request": "true"})
        assert verify.status_code == 410 and "lost its stored data" in verify.text
        assert client.get("/agent?id=r/a").status_code == 200  # the others are unharmed
    with SyncStateStore(lost_url) as store:  # the delete the page offers works
        assert store.delete("r/b")
        assert [i.agent_id for i in store.list_agents()] == ["r/a", "r/c"]


def test_the_store_analysis_counts_a_lost_agent(lost_url: str) -> None:
    client: Any
    with make_client(lost_url) as client:
        report = client.get("/store/analysis")
        assert report.status_code == 200, report.text[:600]
        assert "3 agent(s)" in report.text and 'id="lost-agents"' in report.text
        assert "1 unreadable agent(s)" in report.text


def test_the_lost_pages_delete_form_acknowledges_the_loss(lost_url: str) -> None:
    """The lost page's form says it showed the agent lost: deleted while it still is."""
    import re

    client: Any
    with make_client(lost_url, allow_writes=True) as client:
        page = client.get("/agent?id=r/b").text
        form = html.unescape(page.split('action="/agent/delete"', 1)[1].split("</form>", 1)[0])
        fields = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))
        assert fields["lost"] == "1" and "head" not in fields
        done = client.post("/agent/delete", data={**fields, "confirm": "r/b"})
        assert done.status_code == 200 and "was deleted" in done.text, done.text[:600]
    with SyncStateStore(lost_url) as store:
        assert [i.agent_id for i in store.list_agents()] == ["r/a", "r/c"]


def test_a_lost_agent_written_again_is_not_deleted_by_the_lost_pages_form(lost_url: str) -> None:
    """Acknowledged and saved afresh by another process after the page showed it lost:
    the page's delete deletes nothing (409), the new write is kept."""
    client: Any
    with make_client(lost_url, allow_writes=True) as client:
        page = client.get("/agent?id=r/b")
        assert page.status_code == 410
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        with SyncStateStore(lost_url) as store:  # meanwhile
            assert store.delete("r/b")
            store.save("r/b", {"n": "afresh"})
        form = {"id": "r/b", "confirm": "r/b", "lost": "1", "csrf": csrf}
        r = client.post("/agent/delete", data=form)
        assert r.status_code == 409, r.text[:600]
        assert "written since it was shown" in html.unescape(r.text)
    with SyncStateStore(lost_url) as store:
        assert store.load("r/b").data == {"n": "afresh"}
