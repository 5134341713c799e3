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
