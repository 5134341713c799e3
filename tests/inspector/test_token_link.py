"""The token link (``/?token=...``) and where its redirect may lead."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest

from .conftest import TOKEN, make_client


@pytest.mark.parametrize(
    "path", ["/%2F%2Fevil.example/x", "/%2F%2F%2Fevil.example", "/%2f/evil.example"]
)
def test_the_token_link_never_redirects_to_another_host(seeded_url: str, path: str) -> None:
    # the path's slashes arrive decoded: a Location of //evil.example or ///evil.example
    # is another host to a browser (the URL standard skips any run of slashes there)
    with make_client(seeded_url) as c:
        del c.headers["Authorization"]
        r = c.get(f"{path}?token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303
        location = r.headers["location"]
        assert location.startswith("/") and not location.startswith("//"), location
        assert not location.startswith("/\\"), location
        assert urljoin("http://127.0.0.1/", location).startswith("http://127.0.0.1/")


@pytest.mark.parametrize(
    "token",
    [
        "q1w2e3r4+t5y6/u7i8o9p0==",  # what `openssl rand -base64 18` gives
        "pass;word&more#1234567",
        "correct horse battery staple",
    ],
)
def test_the_printed_link_works_for_any_given_token(token: str) -> None:
    # a token given with --token / $STATEKEEPER_INSPECTOR_TOKEN: the link `serve`
    # prints carries it whole ("+" was read as a space: the link answered 401), and
    # the cookie it sets holds it whole (";" ended the cookie's value)
    from http.cookies import SimpleCookie

    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.inspector.server import start_url

    settings = InspectorSettings(url="memory://", token=token)
    app = create_app(settings, store=StateStore("memory://"))
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        r = c.get(start_url("127.0.0.1", 8765, token), follow_redirects=False)
        assert r.status_code == 303
        jar: SimpleCookie = SimpleCookie()
        jar.load(r.headers["set-cookie"])
        value = jar["sk_inspector_8765"].value
        c.cookies.clear()
        page = c.get("/agents", headers={"cookie": f"sk_inspector_8765={value}"})
        assert page.status_code == 200


def test_two_inspectors_on_one_host_keep_their_own_cookies() -> None:
    # a browser keeps one cookie of a name per host, whatever the port: both
    # inspectors named theirs sk_inspector, so opening the second's link logged the
    # first out (its pages answered 401)
    from http.cookies import SimpleCookie

    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    browser: dict[str, str] = {}  # name -> value: the host's cookies, ports ignored
    clients = []
    for port, token in ((8765, "first-token-0123456789"), (8766, "second-token-0123456789")):
        app = create_app(
            InspectorSettings(url="memory://", token=token), store=StateStore("memory://")
        )
        c = TestClient(app, base_url=f"http://127.0.0.1:{port}")
        c.__enter__()
        clients.append(c)
        r = c.get(f"/?token={token}", follow_redirects=False)
        assert r.status_code == 303
        jar: SimpleCookie = SimpleCookie()
        jar.load(r.headers["set-cookie"])
        browser.update({name: morsel.value for name, morsel in jar.items()})
    try:
        sent = "; ".join(f"{k}={v}" for k, v in browser.items())
        for c in clients:
            c.cookies.clear()
            assert c.get("/agents", headers={"cookie": sent}).status_code == 200
    finally:
        for c in clients:
            c.__exit__(None, None, None)


@pytest.mark.parametrize("token", ["", "short"])
def test_an_empty_or_short_token_is_refused(token: str) -> None:
    # an app embedded with token=os.environ.get("TOKEN", "") and the variable unset:
    # GET /?token= matched the empty token and set an empty cookie, which matched
    # again: anyone who reached the port was in
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.errors import ConfigurationError
    from statekeeper.inspector import InspectorSettings, create_app

    settings = InspectorSettings(url="memory://", token=token)
    try:
        app = create_app(settings, store=StateStore("memory://"))
    except ConfigurationError as exc:
        assert "16 characters" in str(exc)
        return
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        assert c.get("/agents?token=").status_code == 401
        raise AssertionError("an inspector without a real token was created")
