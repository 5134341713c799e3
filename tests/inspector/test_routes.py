"""The inspector's routes through Starlette's test client, on a seeded SQLite store."""

from __future__ import annotations

import re
from html import unescape
from typing import Any
from urllib.parse import urlencode

import pytest

from .conftest import TOKEN, in_thread, make_client
from .seed import HOSTILE_ID, HOSTILE_VALUE


def ids_on(html: str) -> list[str]:
    """Agent ids linked from a list page, in order."""
    return [
        unescape(m)
        for m in re.findall(r'<td class="id"><a href="/agent\?id=[^"]*">(.*?)</a></td>', html)
    ]


def agent_url(agent_id: str, path: str = "/agent", **more: Any) -> str:
    return f"{path}?{urlencode({'id': agent_id, **more})}"


# -- access ----------------------------------------------------------------------------


def test_every_page_needs_the_token(seeded_url: str) -> None:
    with make_client(seeded_url) as c:
        del c.headers["Authorization"]
        for path in ("/agents", "/agent?id=agent-001", "/store", "/static/htmx.min.js"):
            r = c.get(path)
            assert r.status_code == 401, path
            assert TOKEN not in r.text
        assert c.get("/agents", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_token_link_sets_a_cookie_and_drops_the_token_from_the_address(seeded_url: str) -> None:
    with make_client(seeded_url) as c:
        del c.headers["Authorization"]
        r = c.get(f"/agents?q=agent-00&token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "/agents?q=agent-00"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = c.get("/agents?q=agent-00")  # the cookie is enough now
        assert page.status_code == 200
        assert TOKEN not in page.text


def test_token_link_cannot_inject_headers(seeded_url: str) -> None:
    with make_client(seeded_url) as c:
        del c.headers["Authorization"]
        r = c.get(f"/agents%0d%0aX-Evil:%201?token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303
        assert "x-evil" not in r.headers
        assert r.headers["location"].startswith("/agents%0D%0AX-Evil")


def test_security_headers(client: Any) -> None:
    r = client.get("/agents")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"
    assert "<script>" not in r.text.replace('<script src="/static/', "")  # no inline script


def test_static_assets_ship_in_the_package(client: Any) -> None:
    js = client.get("/static/htmx.min.js")
    assert js.status_code == 200 and "htmx" in js.text[:200]
    assert client.get("/static/inspector.css").status_code == 200
    assert client.get("/static/inspector.js").status_code == 200


# -- the agents list -------------------------------------------------------------------


def test_list_pages_through_every_agent_once(client: Any) -> None:
    seen: list[str] = []
    url = "/agents?limit=7"
    pages = 0
    while url:
        html = client.get(url).text
        seen.extend(ids_on(html))
        found = re.search(r'<a rel="next" href="([^"]+)"', html)
        url = unescape(found.group(1)) if found else ""
        pages += 1
    assert seen == sorted(seen)
    # agents, tenants, order, hostile, and the LangGraph thread's stream
    assert len(seen) == len(set(seen)) == 30 + 2 + 1 + 1 + 1
    assert pages == 5


def test_previous_page_is_the_page_before(client: Any) -> None:
    first = ids_on(client.get("/agents?limit=5").text)
    second_html = client.get("/agents?" + urlencode({"limit": 5, "after": first[-1]})).text
    second = ids_on(second_html)
    assert second[0] > first[-1]
    prev = re.search(r'<a rel="prev" href="([^"]+)"', second_html)
    assert prev is not None
    assert ids_on(client.get(unescape(prev.group(1))).text) == first


def test_prefix_search_and_namespace(client: Any) -> None:
    assert ids_on(client.get("/agents?q=agent-01").text) == [f"agent-01{i}" for i in range(10)]
    assert ids_on(client.get("/agents?ns=tenant").text) == ["tenant/alpha", "tenant/beta"]
    assert ids_on(client.get("/agents?ns=tenant&q=b").text) == ["tenant/beta"]
    assert ids_on(client.get("/agents?q=nothing-like-this").text) == []


def test_sort_descending(client: Any) -> None:
    ids = ids_on(client.get("/agents?sort=desc&q=agent-").text)
    assert ids == [f"agent-{i:03d}" for i in range(29, -1, -1)][:50]


def test_state_filter(client: Any) -> None:
    ids = ids_on(client.get("/agents?state=completed").text)
    assert ids == [f"agent-{i:03d}" for i in range(0, 30, 2)]
    rows = client.get("/agents?state=processing&q=agent-00").text
    assert ids_on(rows) == ["agent-001", "agent-003", "agent-005", "agent-007", "agent-009"]


def test_last_write_filters(client: Any) -> None:
    # the seed's clock is in the past (only the LangGraph thread is written now)
    assert ids_on(client.get("/agents?active=1h").text) == ["lg/chat-1#0"]
    idle = ids_on(client.get("/agents?idle=1h&limit=200").text)
    assert len(idle) == 34 and "lg/chat-1#0" not in idle


def test_filter_scan_stops_at_its_budget_and_continues(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.inspector import listing

    monkeypatch.setattr(listing, "SCAN_BUDGET", 4)
    html = client.get("/agents?state=completed&q=agent-").text
    assert "Continue the search" in html
    assert ids_on(html) == ["agent-000", "agent-002"]
    more = re.search(r'<a href="(/agents\?[^"]+)">Continue the search', html)
    assert more is not None
    assert ids_on(client.get(unescape(more.group(1))).text) == ["agent-004", "agent-006"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("sort=up", "sort"),
        ("active=soon", "active"),
        ("ns=a//b", "namespace"),  # an empty segment (nested ones are namespaces)
        ("ns=a/", "namespace"),
    ],
)
def test_bad_list_parameters_are_named(client: Any, query: str, named: str) -> None:
    r = client.get("/agents?" + query)
    assert r.status_code == 400
    assert named in r.text


# -- an agent --------------------------------------------------------------------------


def test_agent_page(client: Any) -> None:
    html = client.get("/agent?id=agent-003").text
    assert '<span class="badge" id="current-state">processing</span>' in html
    assert "&#34;task 3&#34;" in html  # the data, as JSON
    # the diagram: current state highlighted, the transitions this agent took counted
    assert '<g class="state current" data-state="processing">' in html
    assert re.search(r'data-from="processing" data-to="tool_call">.*?call_tool ×1', html)
    assert re.search(r'data-from="idle" data-to="processing">.*?start_processing ×1', html)
    # the timeline: newest first, with principals and patch paths
    seqs = [int(s) for s in re.findall(r'<tr class="event" data-seq="(\d+)">', html)]
    assert seqs == [4, 3, 2, 1]
    assert "worker-2" in html and "add /tool" in html
    # the lease section of an agent without a lease
    assert "No lease was ever taken" in html


def test_lease_holder_shown(client: Any) -> None:
    html = client.get("/agent?id=order-7").text
    assert "worker-9" in html and "Fencing token" in html


def test_time_travel_and_diff(client: Any) -> None:
    old = client.get("/agent/state?id=agent-003&seq=1").text
    assert "At seq 1" in old and "time travel: the head is 4" in old
    assert "tool" not in old and "idle" in old
    now = client.get("/agent/state?id=agent-003&seq=4").text
    assert '<span class="key">result</span>' in now
    diff = client.get("/agent/diff?id=agent-003&a=2&b=4").text
    assert "seq 2 → seq 4" in diff and "2 change" not in diff
    assert '<tr class="op-add">' in diff and "/data/tool" in diff
    moved = client.get("/agent/diff?id=agent-003&a=1&b=3").text
    assert re.search(
        r"state <span class=\"badge\">idle</span> → <span class=\"badge\">tool_call", moved
    )


def test_event_shows_its_patch_against_the_state_before(client: Any) -> None:
    html = client.get("/agent/event?id=agent-003&seq=4").text
    assert "Event 4" in html and "worker-2" in html and "receive_result" in html
    assert '<tr class="op-add">' in html and "/tool/result" in html
    assert "Show the state at seq 4" in html and "Diff 3 → 4" in html
    replaced = client.get("/agent/event?id=agent-003&seq=1").text
    assert "replace" in replaced


def test_seq_out_of_range_is_a_clear_error(client: Any) -> None:
    r = client.get("/agent/state?id=agent-003&seq=99")
    assert r.status_code == 400 and "outside 1..4" in r.text
    assert client.get("/agent/diff?id=agent-003&a=0&b=2").status_code == 400
    assert client.get("/agent/event?id=agent-003&seq=abc").status_code == 400


def test_unknown_agent_is_404(client: Any) -> None:
    r = client.get("/agent?id=no-such-agent")
    assert r.status_code == 404 and "no-such-agent" in r.text
    assert client.get("/agent").status_code == 400


def test_keys_and_steps(client: Any) -> None:
    html = client.get("/agent/keys?id=order-7").text
    assert "<code>charge</code>" in html and "<code>ship</code>" in html
    assert "&#34;charged&#34;: 42" in html
    assert "<code>pay-7</code>" in html and "<code>step:charge</code>" in html
    assert "key index holds 3 record(s)" in html


def test_older_events_page(store_copy: str) -> None:
    from statekeeper import StateStore

    async def grow() -> None:
        async with StateStore(store_copy) as store:
            for n in range(120):
                await store.save("long", {"n": n})

    in_thread(grow)
    with make_client(store_copy) as c:
        first = c.get("/agent?id=long").text
        seqs = [int(s) for s in re.findall(r'<tr class="event" data-seq="(\d+)">', first)]
        assert seqs[:2] == [120, 119] and seqs[-1] == 71
        older = c.get("/agent/events?id=long&before=71").text
        older_seqs = re.findall(r'<tr class="event" data-seq="(\d+)">', older)
        assert int(older_seqs[0]) == 70
        assert "before=21" in older
        newer = c.get("/agent/events?id=long&after=118").text
        assert [int(s) for s in re.findall(r'<tr class="event" data-seq="(\d+)">', newer)] == [
            120,
            119,
        ]


# -- verification ----------------------------------------------------------------------


def test_verify_ok(client: Any) -> None:
    html = client.get("/agent/verify?id=agent-003").text
    assert "Verified." in html and "4 event(s)" in html


def test_verify_explains_a_damaged_snapshot(store_copy: str) -> None:
    import sqlite3

    path = store_copy.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        row = db.execute(
            "SELECT seq FROM sk_snapshots WHERE agent_id = 'agent-000' ORDER BY seq LIMIT 1"
        ).fetchone()
        assert row is not None, "the seed stores snapshots (snapshot_every=3)"
        db.execute(
            "UPDATE sk_snapshots SET payload = X'00' || payload WHERE agent_id = 'agent-000'"
        )
    with make_client(store_copy) as c:
        html = c.get("/agent/verify?id=agent-000").text
    assert "problem(s) found" in html
    assert '<span class="badge bad">snapshot</span>' in html
    assert "statekeeper repair" in html  # the explanation says what to do


# -- escaping --------------------------------------------------------------------------


def _no_live_markup(html: str) -> None:
    assert "<script>window.__pwned" not in html
    assert "<img src=x" not in html
    assert "<b onmouseover" not in html
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert all('src="/static/' in s for s in scripts), scripts


def test_hostile_ids_and_data_render_inert(client: Any) -> None:
    listing = client.get("/agents").text
    _no_live_markup(listing)
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in listing
    page = client.get(agent_url(HOSTILE_ID))
    assert page.status_code == 200
    _no_live_markup(page.text)
    assert "&lt;/pre&gt;&lt;script&gt;window.__pwned=3" in page.text
    for path, more in (
        ("/agent/state", {"seq": 1}),
        ("/agent/event", {"seq": 2}),
        ("/agent/diff", {"a": 1, "b": 2}),
        ("/agent/keys", {}),
        ("/agent/verify", {}),
    ):
        r = client.get(agent_url(HOSTILE_ID, path, **more))
        assert r.status_code == 200, path
        _no_live_markup(r.text)
    missing = client.get(agent_url(HOSTILE_ID + "-missing"))
    assert missing.status_code == 404
    _no_live_markup(missing.text)
    _no_live_markup(client.get("/agents?q=" + HOSTILE_VALUE).text)


def test_langgraph_thread_escapes_messages(client: Any) -> None:
    html = client.get("/thread?id=chat-1&cp=1ef00000-0000-6000-8000-000000000001").text
    assert "What is &lt;b&gt;2+2&lt;/b&gt;?" in html
    _no_live_markup(html)


# -- LangGraph threads -----------------------------------------------------------------


def test_threads_list_and_tree_with_fork(client: Any) -> None:
    listing = client.get("/threads").text
    assert '<a href="/thread?id=chat-1">chat-1</a>' in listing
    html = client.get("/thread?id=chat-1").text
    order = re.findall(r'<li class="cp depth-(\d)[^"]*" data-checkpoint="([^"]+)"', html)
    assert [cid[-2:] for _, cid in order] == ["00", "01", "02", "09"]
    assert [d for d, _ in order] == ["0", "0", "0", "1"]  # the fork's branch indented
    assert "fork: 2 branches" in html


def test_thread_pages_start_no_threads(client: Any) -> None:
    import threading

    def loops() -> set[threading.Thread]:  # (a saver's loop thread, by its name)
        return {t for t in threading.enumerate() if t.name == "statekeeper-langgraph"}

    before = loops()  # (another test of this worker may have left its saver's running)
    for _ in range(3):
        assert client.get("/thread?id=chat-1").status_code == 200
    assert loops() <= before  # no saver loop thread per request


def test_thread_checkpoint_channels_writes_and_chat(client: Any) -> None:
    html = client.get("/thread?id=chat-1&cp=1ef00000-0000-6000-8000-000000000002").text
    bubbles = re.findall(r'<li class="msg role-(\w+)">.*?<div class="bubble">(.*?)</div>', html)
    assert [role for role, _ in bubbles] == ["human", "ai", "ai"]
    assert bubbles[1][1] == "4"
    fork = client.get("/thread?id=chat-1&cp=1ef00000-0000-6000-8000-000000000009").text
    assert "<code>task-1</code>" in fork and "&#34;content&#34;: &#34;6&#34;" in fork
    assert client.get("/thread?id=no-thread").status_code == 404


# -- the store page --------------------------------------------------------------------


def test_store_page(client: Any) -> None:
    html = client.get("/store").text
    assert '<span class="badge ok" id="health">healthy</span>' in html
    assert "sqlite" in html
    assert "not installed here" in html or 'hx-get="/store/analysis"' in html
    count = client.get("/store/count").text
    assert count.startswith("35 agents")


def test_credentials_are_never_rendered() -> None:
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    secret = "s3cr3t-Passw0rd"
    url = f"postgresql://admin:{secret}@db.internal:5432/agents"
    store = StateStore("memory://")
    settings = InspectorSettings(url=url, token=TOKEN)
    with TestClient(create_app(settings, store=store), base_url="http://127.0.0.1") as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        for path in ("/store", "/agents", "/agent?id=missing", "/threads"):
            r = c.get(path)
            assert secret not in r.text, path
            assert TOKEN not in r.text, path
        assert "db.internal" in c.get("/store").text


def test_the_store_page_says_an_encrypted_store_is_encrypted_without_its_key(
    tmp_path: Any,
) -> None:
    """Opened without the key, an encrypted store is not shown as "none (checksums
    only)": the page says its records are encrypted and cannot be read there."""
    import asyncio

    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.security import Keyring, generate_key

    url = f"sqlite:///{tmp_path / 'enc.db'}"

    async def seed() -> None:
        keyring = Keyring({"k1": generate_key()}, active="k1")
        async with StateStore(url, keyring=keyring) as store:
            await store.save("secret/a", {"ssn": "123-45-6789"})

    asyncio.run(seed())
    settings = InspectorSettings(url=url, token=TOKEN)
    for store, shown in (
        (StateStore(url), "AES-256-GCM, no key loaded: records cannot be read"),
        (StateStore("memory://"), "none (checksums only)"),
    ):
        with TestClient(create_app(settings, store=store), base_url="http://127.0.0.1") as c:
            c.headers["Authorization"] = f"Bearer {TOKEN}"
            assert f'<dd id="encryption">{shown}' in c.get("/store").text


def test_an_encrypted_store_without_its_key_lists_its_agents_and_names_the_key(
    tmp_path: Any,
) -> None:
    """Opened without the key, the agents page failed whole (500 "KeyNotFound", "integrity
    check failed") though ids and heads are readable; the agent page called a missing
    key an integrity failure. Now the list shows every agent (its state as unknown) and
    the agent page says which key is missing and how to give it."""
    import asyncio

    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.security import Keyring, generate_key

    url = f"sqlite:///{tmp_path / 'enc.db'}"

    async def seed() -> None:
        keyring = Keyring({"k1": generate_key()}, active="k1")
        async with StateStore(url, keyring=keyring) as store:
            await store.save("secret/a", {"ssn": "123-45-6789"})
            await store.save("secret/b", {"ssn": "987-65-4321"})

    asyncio.run(seed())
    settings = InspectorSettings(url=url, token=TOKEN)
    with TestClient(create_app(settings, store=StateStore(url)), base_url="http://127.0.0.1") as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        listing = c.get("/agents")
        assert listing.status_code == 200
        assert "secret/a" in listing.text and "secret/b" in listing.text
        page = c.get("/agent?id=secret/a")
        assert page.status_code == 403
        assert "Encrypted: key not loaded" in page.text
        assert "&#39;k1&#39;" in page.text and "--key-file" in page.text
        assert "integrity check failed" not in page.text
        assert "123-45-6789" not in listing.text + page.text


# -- writes ----------------------------------------------------------------------------


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found is not None
    return found.group(1)


def test_read_only_by_default(client: Any) -> None:
    html = client.get("/agent?id=agent-001").text
    assert 'action="/agent/delete"' not in html
    r = client.post("/agent/delete", data={"id": "agent-001", "confirm": "agent-001"})
    assert r.status_code == 400 and "read-only" in r.text
    assert client.get("/agent?id=agent-001").status_code == 200


def test_delete_needs_csrf_same_origin_and_confirmation(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        page = c.get("/agent?id=agent-001").text
        csrf = _csrf(page)
        shown = dict(re.findall(r'name="(head|mark)" value="([^"]*)"', page))  # its head
        form = {"id": "agent-001", "confirm": "agent-001", **shown}
        no_token = c.post("/agent/delete", data=form)
        assert no_token.status_code == 400 and "CSRF" in no_token.text
        wrong = c.post("/agent/delete", data={**form, "csrf": "0" * 64})
        assert wrong.status_code == 400
        cross = c.post(
            "/agent/delete", data={**form, "csrf": csrf}, headers={"Origin": "https://evil.test"}
        )
        assert cross.status_code == 400 and "another site" in cross.text
        unconfirmed = c.post("/agent/delete", data={"id": "agent-001", "csrf": csrf})
        assert unconfirmed.status_code == 400
        assert c.get("/agent?id=agent-001").status_code == 200  # all refused: still there
        ok = c.post(
            "/agent/delete", data={**form, "csrf": csrf}, headers={"Origin": "http://127.0.0.1"}
        )
        assert ok.status_code == 200 and "was deleted" in ok.text
        assert c.get("/agent?id=agent-001").status_code == 404


def test_repair_rebuilds_a_damaged_snapshot(store_copy: str) -> None:
    import sqlite3

    with sqlite3.connect(store_copy.removeprefix("sqlite:///")) as db:
        db.execute(
            "UPDATE sk_snapshots SET payload = X'00' || payload WHERE agent_id = 'agent-000'"
        )
    with make_client(store_copy, allow_writes=True) as c:
        csrf = _csrf(c.get("/agent?id=agent-000").text)
        assert "problem(s) found" in c.get("/agent/verify?id=agent-000").text
        done = c.post("/agent/repair", data={"id": "agent-000", "csrf": csrf})
        assert done.status_code == 200 and "1 snapshot(s) rebuilt" in done.text
        assert "Verified." in c.get("/agent/verify?id=agent-000").text


def test_thread_retention_apply(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        html = c.get("/thread?id=chat-1").text
        csrf = _csrf(html)
        up_to = max(re.findall(r'data-checkpoint="([^"]+)"', html))  # the newest shown
        r = c.post(
            "/thread/retention",
            data={"thread": "chat-1", "keep_last": "1", "csrf": csrf, "up_to": up_to},
        )
        assert r.status_code == 200 and "checkpoint(s)" in r.text
        after = c.get("/thread?id=chat-1").text
        assert len(re.findall(r'<li class="cp ', after)) == 1


def test_a_checkpoint_retention_removed_is_not_found(store_copy: str) -> None:
    """The thread page asked for a checkpoint retention removed answers 404 saying so
    (was: 200, the page without the checkpoint, as if it had nothing to show)."""
    with make_client(store_copy, allow_writes=True) as c:
        html = c.get("/thread?id=chat-1").text
        oldest = min(re.findall(r'data-checkpoint="([^"]+)"', html))
        assert c.get(f"/thread?id=chat-1&cp={oldest}").status_code == 200
        csrf = _csrf(html)
        up_to = max(re.findall(r'data-checkpoint="([^"]+)"', html))  # the newest shown
        r = c.post(
            "/thread/retention",
            data={"thread": "chat-1", "keep_last": "1", "csrf": csrf, "up_to": up_to},
        )
        assert r.status_code == 200
        gone = c.get(f"/thread?id=chat-1&cp={oldest}")
        assert gone.status_code == 404, gone.text
        assert "retention removed it" in unescape(gone.text) and oldest in gone.text
        assert c.get("/thread?id=chat-1&cp=no-such-checkpoint").status_code == 404


def test_an_agent_compacted_by_retention_has_a_page(tmp_path: Any) -> None:
    from statekeeper import StateStore
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    url = f"sqlite:///{tmp_path / 'kept.db'}"

    async def build() -> None:
        async with StateStore(url, snapshot_every=2) as store:
            for i in range(12):
                await store.save("kept", {"i": i})
            await apply_retention(store, RetentionPolicy.parse("* keep_last=3"))

    in_thread(build)
    with make_client(url) as c:
        page = c.get("/agent?id=kept")
        assert page.status_code == 200, page.text
        assert "was compacted by retention" not in page.text  # (no error box)
        assert set(re.findall(r'data-seq="(\d+)"', page.text)) == {"10", "11", "12"}


def test_a_seq_before_the_retention_base_answers_410_history_compacted(tmp_path: Any) -> None:
    """Every route taking a seq, asked for one retention compacted (below its base, or
    the base's own event), answers 410 with HistoryCompacted's words; never a 500
    (the event view failed an assert). The seqs kept still answer 200, and the keys
    view reads the kept events."""
    from statekeeper import StateStore
    from statekeeper.errors import HistoryCompacted
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    url = f"sqlite:///{tmp_path / 'kept.db'}"

    async def build() -> None:
        async with StateStore(url, snapshot_every=2) as store:
            for i in range(12):
                await store.save("kept", {"i": i}, idempotency_key=f"k{i}")
            await apply_retention(store, RetentionPolicy.parse("* keep_last=3"))

    in_thread(build)
    words = unescape(str(HistoryCompacted("kept", 9)))
    gone = [
        agent_url("kept", "/agent/event", seq=3),
        agent_url("kept", "/agent/event", seq=9),  # the base: its snapshot is kept, not its event
        agent_url("kept", "/agent/state", seq=3),
        agent_url("kept", "/agent/diff", a=3, b=12),
        agent_url("kept", "/agent/diff", a=12, b=8),
    ]
    with make_client(url) as c:
        for path in gone:
            r = c.get(path)
            assert r.status_code == 410, (path, r.status_code)
            assert words in unescape(r.text) and "History compacted" in r.text, path
        for path in (
            agent_url("kept", "/agent/event", seq=10),
            agent_url("kept", "/agent/state", seq=9),
            agent_url("kept", "/agent/diff", a=9, b=12),
        ):
            assert c.get(path).status_code == 200, path
        keys = c.get(agent_url("kept", "/agent/keys"))
        assert keys.status_code == 200, keys.text
        assert re.findall(r"<code>(k\d+)</code>", keys.text) == ["k9", "k10", "k11"]
        assert "compacted the history up to seq 9" in keys.text
