"""Run the inspector with uvicorn (what ``statekeeper serve`` calls)."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import sys
from typing import TextIO
from urllib.parse import quote

from ..errors import ConfigurationError
from .settings import InspectorSettings

__all__ = ["check_host", "serve", "start_url"]


def check_host(host: str, *, public: bool) -> str:
    """``host`` if binding to it is allowed: a loopback address always; any other
    only with ``public`` (``--public``), since then the token is all that guards it."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise ConfigurationError(
            f"--host must be an IP address or localhost, not {host!r}"
        ) from None
    if not loopback and not public:
        raise ConfigurationError(
            f"refusing to listen on {host} (reachable from other machines) without --public;"
            " the inspector binds to 127.0.0.1 by default"
        )
    return host


def shown_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def start_url(host: str, port: int, token: str) -> str:
    # quoted: a token given with --token may hold "+", "&", "#" (base64 does), which
    # a query would read as a space, a new parameter, the fragment
    return f"http://{shown_host(host)}:{port}/?token={quote(token, safe='')}"


def serve(
    settings: InspectorSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    public: bool = False,
    out: TextIO | None = None,
) -> None:
    """Serve until interrupted; prints the address with the token first."""
    import uvicorn

    from .app import create_app

    check_host(host, public=public)
    # the address listened on is a name of this server (the printed link gives it,
    # 0.0.0.0 or [::] too)
    hosts = (*settings.allowed_hosts, host)
    app = create_app(dataclasses.replace(settings, allowed_hosts=hosts))
    # bind first, so that the address printed already accepts connections (port 0:
    # the one the system chose)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    stream = out or sys.stdout
    mode = "writes allowed" if settings.allow_writes else "read-only"
    if settings.principal is not None:
        mode += f", as {settings.principal}"
    print(
        f"statekeeper inspector ({mode}) on {start_url(host, bound, settings.token)}", file=stream
    )
    if settings.metrics:
        print(f"metrics on http://{shown_host(host)}:{bound}/metrics (bearer token)", file=stream)
    stream.flush()
    # open live streams (server-sent events) never end by themselves: stop waiting
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
