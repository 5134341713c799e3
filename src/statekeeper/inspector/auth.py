"""Who may see the inspector, and what a page may do in the browser.

* **Token.** Every request needs the inspector's token: ``Authorization: Bearer
  <token>``, or the ``sk_inspector_<port>`` cookie. Opening ``/?token=<token>`` (the link
  ``statekeeper serve`` prints) sets the cookie (HttpOnly, SameSite=Strict) and
  redirects to the same page without the token in its address. Tokens are compared
  in constant time; a wrong one is a 401 that says nothing about the right one.
* **CSRF.** Writes (only with ``--allow-writes``) are POSTs that must carry a form
  field ``csrf`` equal to an HMAC of the token (so a page of another site, which
  cannot read ours, cannot forge it), and an ``Origin``/``Referer`` of this server
  when the browser sends one.
* **Headers.** A strict Content-Security-Policy (scripts and styles from this server
  only, nothing inline, no frames), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer``, ``Cache-Control: no-store``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ..errors import ConfigurationError

__all__ = [
    "COOKIE",
    "CSP",
    "MIN_TOKEN",
    "TokenMiddleware",
    "cookie_name",
    "csrf_token",
    "new_token",
    "valid_csrf",
]

COOKIE = "sk_inspector"
#: the shortest token accepted (``statekeeper serve --token`` and ``create_app``)
MIN_TOKEN = 16
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh random token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def csrf_token(token: str) -> str:
    """The CSRF value forms carry: an HMAC of the token (reveals nothing about it)."""
    return hmac.new(token.encode(), b"statekeeper-inspector-csrf", hashlib.sha256).hexdigest()


def valid_csrf(token: str, value: str | None) -> bool:
    return value is not None and hmac.compare_digest(csrf_token(token), value)


def cookie_name(scope: Scope) -> str:
    """The cookie of the inspector ``scope`` reached: named with its port, since a
    browser keeps one cookie of a name for a host whatever its port (a second
    inspector's link replaced the first's cookie, which then answered 401)."""
    server = scope.get("server")
    return f"{COOKIE}_{server[1]}" if server and server[1] is not None else COOKIE


def _cookie(headers: list[tuple[bytes, bytes]], wanted: str) -> str | None:
    for name, value in headers:
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                if key == wanted:
                    return unquote(val)
    return None


def _bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return rest.strip()
    return None


class TokenMiddleware:
    """Refuses every request without the token; adds the security headers."""

    def __init__(self, app: ASGIApp, token: str, *, exempt: tuple[str, ...] = ()) -> None:
        # an empty token let anyone in (``?token=`` matched it, then an empty cookie):
        # an embedding that read an unset variable served an open inspector
        if len(token) < MIN_TOKEN:
            raise ConfigurationError(
                f"the inspector's token must be at least {MIN_TOKEN} characters (got {len(token)})"
            )
        self.app = app
        self._token = token.encode()
        self._exempt = exempt

    def _ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])
        query = scope.get("query_string", b"").decode("latin-1")
        params = parse_qsl(query, keep_blank_values=True)
        given = [v for k, v in params if k == "token"]
        path: str = scope.get("path", "/")

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + _HEADERS
            await send(message)

        if given and self._ok(given[0]) and scope.get("method") == "GET":
            rest = urlencode([(k, v) for k, v in params if k != "token"])
            # one leading slash: the path arrives decoded, and a Location starting
            # "//" (or "///") is another host to a browser (an open redirect)
            location = "/" + quote(path.lstrip("/"), safe="/") + ("?" + rest if rest else "")
            await send_secured(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", location.encode("latin-1", "replace")),
                        (
                            b"set-cookie",
                            # quoted: a given token may hold what a cookie cannot
                            # (";", ",", spaces)
                            f"{cookie_name(scope)}={quote(self._token.decode(), safe='')}; "
                            "HttpOnly; SameSite=Strict; Path=/".encode(),
                        ),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if (
            path.startswith(self._exempt)
            or self._ok(_bearer(headers))
            or self._ok(_cookie(headers, cookie_name(scope)))
        ):
            await self.app(scope, receive, send_secured)
            return
        body = (
            b"401: this statekeeper inspector needs its token. Open the link "
            b"`statekeeper serve` printed (it ends in ?token=...), or send "
            b"'Authorization: Bearer <token>'.\n"
        )
        await send_secured(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"www-authenticate", b'Bearer realm="statekeeper inspector"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
