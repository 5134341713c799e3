"""DNS rebinding: a request must name this server in its ``Host`` header.

A page of another site whose DNS name was re-bound to 127.0.0.1 is same-origin with
the inspector to the browser; its requests carry that name in ``Host``. Before the
check, every one of them was served (given the token: a leaked link was enough for any
web page to read every agent through the victim's browser)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper.errors import ConfigurationError

from .conftest import TOKEN, make_client

EVIL = ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.evil.example"]
MALFORMED = ["", "127.0.0.1:x", "::1", "[::1", "[::1]x", "127.0.0.1@evil.example", "a b"]
OWN = ["127.0.0.1", "127.0.0.1:8765", "localhost", "LocalHost:1", "[::1]", "[::1]:8765"]


@pytest.mark.parametrize("host", EVIL + MALFORMED)
@pytest.mark.parametrize(
    "path", ["/agents", "/agent?id=agent-000", "/static/favicon.svg", "/store"]
)
def test_another_host_is_refused_before_the_token_and_routes(
    seeded_url: str, host: str, path: str
) -> None:
    # the bearer token is right: only the Host is wrong (what a rebinding page sends)
    with make_client(seeded_url) as c:
        r = c.get(path, headers={"host": host})
        assert r.status_code == 400, (host, path, r.status_code)
        assert "does not answer to the host" in r.text
        assert "agent-000" not in r.text and TOKEN not in r.text
        assert r.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("host", EVIL)
def test_the_token_link_on_another_host_sets_no_cookie(seeded_url: str, host: str) -> None:
    with make_client(seeded_url) as c:
        del c.headers["Authorization"]
        r = c.get(f"/?token={TOKEN}", headers={"host": host}, follow_redirects=False)
        assert r.status_code == 400 and "set-cookie" not in r.headers


@pytest.mark.parametrize("host", OWN)
def test_the_loopback_names_with_or_without_a_port_are_served(seeded_url: str, host: str) -> None:
    with make_client(seeded_url) as c:
        assert c.get("/agents", headers={"host": host}).status_code == 200


def test_two_host_headers_are_refused_and_none_is_served() -> None:
    # no browser sends either; one without a Host is an HTTP/1.0 tool or a raw ASGI
    # caller, never a page (a rebinding page always names its own host)
    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    app = create_app(InspectorSettings(url="memory://", token=TOKEN), store=StateStore("memory://"))
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    bearer = (b"authorization", f"Bearer {TOKEN}".encode())
    for hosts in ([b"127.0.0.1", b"evil.example"], [b"evil.example", b"127.0.0.1"], []):
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/favicon.ico",
            "query_string": b"",
            "headers": [*((b"host", h) for h in hosts), bearer],
            "server": ("127.0.0.1", 8765),
        }
        asyncio.run(app(scope, receive, send))
    assert statuses == [400, 400, 301]


def test_the_address_reached_is_served() -> None:
    # a server bound to 0.0.0.0 (--public) is opened at one of its addresses
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    app = create_app(InspectorSettings(url="memory://", token=TOKEN), store=StateStore("memory://"))
    with TestClient(app, base_url="http://192.0.2.7:8765") as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        assert c.get("/agents").status_code == 200
        assert c.get("/agents", headers={"host": "192.0.2.8:8765"}).status_code == 400


def test_a_listed_name_is_served_and_only_it(seeded_url: str) -> None:
    with make_client(seeded_url, allowed_hosts=("Inspector.Example.com", "[2001:db8::1]")) as c:
        assert c.get("/agents", headers={"host": "inspector.example.com"}).status_code == 200
        assert c.get("/agents", headers={"host": "inspector.example.com:443"}).status_code == 200
        assert c.get("/agents", headers={"host": "[2001:DB8:0::1]:80"}).status_code == 200
        assert c.get("/agents", headers={"host": "other.example.com"}).status_code == 400


@pytest.mark.parametrize(
    "name", ["", "http://inspector.example", "inspector.example:8080", "a/b", "[::1"]
)
def test_a_malformed_allowed_host_is_a_configuration_error(name: str) -> None:
    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    settings = InspectorSettings(url="memory://", token=TOKEN, allowed_hosts=(name,))
    with pytest.raises(ConfigurationError, match="allowed host"):
        create_app(settings, store=StateStore("memory://"))


class _Started(Exception):
    """The response started: its status (stops a stream that would never end)."""


@pytest.mark.parametrize("host", [b"evil.example", b"127.0.0.1"])
def test_the_live_stream_from_another_host_is_refused(seeded_url: str, host: bytes) -> None:
    # the server-sent-events stream never ends by itself: read its status, then stop
    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    async def main() -> int:
        async with StateStore(seeded_url) as store:
            settings = InspectorSettings(url=seeded_url, token=TOKEN)
            app = create_app(settings, store=store)

            received: list[bool] = []

            async def receive() -> dict[str, Any]:
                if not received:
                    received.append(True)
                    return {"type": "http.request", "body": b"", "more_body": False}
                await asyncio.Event().wait()  # the client stays (until cancelled)
                raise AssertionError("unreachable")

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    raise _Started(message["status"])

            scope = {
                "type": "http",
                "method": "GET",
                "path": "/agent/live",
                "query_string": b"id=agent-000",
                "headers": [(b"host", host), (b"authorization", f"Bearer {TOKEN}".encode())],
                "server": ("127.0.0.1", 8765),
            }
            try:
                await app(scope, receive, send)
            except _Started as started:
                return int(started.args[0])
            raise AssertionError("no response")

    assert asyncio.run(main()) == (400 if host == b"evil.example" else 200)


def test_a_websocket_from_another_host_is_closed_unserved() -> None:
    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    app = create_app(InspectorSettings(url="memory://", token=TOKEN), store=StateStore("memory://"))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "path": "/agent/live",
        "query_string": b"id=agent-000",
        "headers": [(b"host", b"evil.example"), (b"authorization", f"Bearer {TOKEN}".encode())],
        "server": ("127.0.0.1", 8765),
    }
    asyncio.run(app(scope, receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]


@pytest.mark.parametrize(
    ("path", "host", "bearer", "status"),
    [
        ("/agents", "127.0.0.1", True, 200),
        (f"/?token={TOKEN}", "127.0.0.1", False, 303),  # the token is in this address
        ("/agents", "127.0.0.1", False, 401),
        ("/agent?id=no-such-agent", "127.0.0.1", True, 404),
        ("/static/favicon.svg", "127.0.0.1", True, 200),
        ("/agents", "evil.example", True, 400),
    ],
)
def test_every_response_carries_the_security_headers(
    seeded_url: str, path: str, host: str, bearer: bool, status: int
) -> None:
    # Referrer-Policy: a page's address (the token link's, before its redirect) never
    # reaches another site in a Referer; no frames; no inline script
    with make_client(seeded_url) as c:
        if not bearer:
            del c.headers["Authorization"]
        r = c.get(path, headers={"host": host}, follow_redirects=False)
        assert r.status_code == status
        assert r.headers.get_list("referrer-policy") == ["no-referrer"]
        assert r.headers.get_list("x-frame-options") == ["DENY"]
        assert r.headers.get_list("x-content-type-options") == ["nosniff"]
        assert r.headers.get_list("cache-control") == ["no-store"]
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
