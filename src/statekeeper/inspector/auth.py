"""Who may see the inspector, and what a page may do in the browser.

* **Host.** Every request must name this server in its ``Host`` header: localhost,
  127.0.0.1, [::1], the address it was reached at or bound to, or a name listed in
  ``allowed_hosts`` (``--allowed-host``), any port (a request without a Host, which no
  browser sends, is let through). Anything else is a 400 before the
  token is even looked at: a page of another site whose name was re-bound to
  127.0.0.1 (DNS rebinding) is same-origin with us to the browser, and could
  otherwise use a token it learned to read every agent.
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
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ..errors import ConfigurationError

__all__ = [
    "COOKIE",
    "CSP",
    "LOOPBACK_HOSTS",
    "MIN_TOKEN",
    "TokenMiddleware",
    "allowed_host",
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

#: the names a request may always give in its Host header (with any port)
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: the longest Host shown back in a refusal
_SHOWN = 100

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


def host_name(value: str) -> str | None:
    """The name a ``Host`` header's ``value`` gives (lowercased; an IPv6 address
    without its brackets), its port dropped; None when it is not a host[:port]."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, port = value[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return None
        try:
            name = str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
        port = port[1:]
    else:
        name, colon, port = value.partition(":")
        if colon and not port:
            return None
        if not name or any(c in name for c in "/\\@?#[]: \t"):
            return None
    return name if not port or port.isdigit() else None


def allowed_host(name: str) -> str:
    """A name of ``allowed_hosts`` (``--allowed-host``) as requests give it: a host
    name or an IP address (IPv6 with or without brackets), without a port or scheme."""
    value = name.strip().lower()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        found = host_name(value)
    if found is None or found != value:
        raise ConfigurationError(
            "an allowed host (--allowed-host) is a host name or an IP address, without"
            f" a scheme, path or port, not {name!r}"
        )
    return found


def _own_names(scope: Scope) -> set[str]:
    """The address the request reached (a server bound to 0.0.0.0 answers on each)."""
    server = scope.get("server")
    if not server or not isinstance(server[0], str):
        return set()
    names = {server[0].lower()}
    try:
        address = ipaddress.ip_address(server[0])
    except ValueError:
        return names
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        names.add(str(address.ipv4_mapped))  # a dual-stack socket reached over IPv4
    return names


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

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        *,
        exempt: tuple[str, ...] = (),
        hosts: Iterable[str] = (),
    ) -> None:
        # an empty token let anyone in (``?token=`` matched it, then an empty cookie):
        # an embedding that read an unset variable served an open inspector
        if len(token) < MIN_TOKEN:
            raise ConfigurationError(
                f"the inspector's token must be at least {MIN_TOKEN} characters (got {len(token)})"
            )
        self.app = app
        self._token = token.encode()
        self._exempt = exempt
        self._hosts = LOOPBACK_HOSTS | {allowed_host(h) for h in hosts}

    def _host_ok(self, scope: Scope, headers: list[tuple[bytes, bytes]]) -> str | None:
        """None when the request names this server; else the Host it gave (shown)."""
        given = [value for name, value in headers if name == b"host"]
        if not given:
            # no browser leaves it out (HTTP/1.0 tools and raw ASGI callers do): not
            # a rebinding page, which always names its own host
            return None
        if len(given) == 1:
            name = host_name(given[0].decode("latin-1"))
            if name is not None and (name in self._hosts or name in _own_names(scope)):
                return None
        shown = b", ".join(given).decode("latin-1")
        return repr(shown[:_SHOWN] + ("..." if len(shown) > _SHOWN else ""))

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

        # before the token, the routes and the token link: a re-bound name never
        # reaches them (nor gets a cookie set)
        wrong_host = self._host_ok(scope, headers)
        if wrong_host is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            refusal = (
                f"400: this statekeeper inspector does not answer to the host {wrong_host}."
                " Open it at the address `statekeeper serve` printed; a name of a"
                " reverse proxy must be listed with --allowed-host.\n"
            )
            await send_secured(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": refusal.encode()})
            return

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
