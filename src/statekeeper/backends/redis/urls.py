"""Redis URLs: checking them, reading statekeeper's own options out of them.

Forms: ``redis://host:6379/0``, ``rediss://`` (TLS), ``unix:///path.sock``, and for a
Redis Cluster ``redis+cluster://host1:7000,host2:7001/`` (``rediss+cluster://`` for
TLS): one or more seed nodes, the client discovers the rest (``CLUSTER SLOTS``).
"""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ...errors import ConfigurationError, InvalidArgument
from ..redact import mask_url, misparsed_password, scrub
from ..url_options import float_option, int_option, split_query

__all__ = ["CLUSTER_SCHEMES", "check_redis_url", "cluster_nodes", "is_cluster", "split_options"]

#: statekeeper's options in a Redis URL (the rest go to redis-py)
OWN_OPTIONS = (
    "prefix",
    "ttl",
    "retry_timeout",
    "max_connections",
    "pool_timeout",
    "connect_timeout",
    "socket_timeout",
    "feed",
    "shards",
    "wait_replicas",
    "wait_timeout",
    "evictable",
)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_INT_OPTIONS = ("max_connections", "shards", "wait_replicas")


def _driver_options() -> frozenset[str]:
    """The query options redis-py understands in a URL (the rest would fail later)."""
    from redis.asyncio import connection as _connection

    names = set(_connection.URL_QUERY_ARGUMENT_PARSERS)
    for cls in (
        _connection.AbstractConnection,
        _connection.Connection,
        _connection.SSLConnection,
        _connection.UnixDomainSocketConnection,
    ):
        names.update(inspect.signature(cls.__init__).parameters)
    names.difference_update({"self", "kwargs", "args", "host", "port", "path", "retry"})
    return frozenset(names)


def is_cluster(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The seed nodes of a ``redis+cluster://h1:p1,h2:p2`` URL (port 6379 if omitted)."""
    shown = mask_url(url)
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes: list[tuple[str, int]] = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":") if ":" in part else (part, "", "6379")
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(
                f"a cluster node is host:port, not {part!r}, in {shown!r} "
                "(redis+cluster://host1:7000,host2:7001)"
            )
        nodes.append((host, int(port)))
    return nodes


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL redis-py would misread or fail on later: a database that is
    not a number (``redis://host/abc`` is not silently db 0), a bad port, an unknown
    option. The error names the bad part and masks the password."""
    try:
        _check_redis_url(url)
    except ConfigurationError as exc:
        if misparsed_password(url) is None:
            raise
        # a password with an unencoded "/" or "#" is cut into host, path, fragment:
        # the bad part named may be a piece of it
        raise ConfigurationError(scrub(str(exc), url)) from None


def _check_redis_url(url: str) -> None:
    shown = mask_url(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    cluster = scheme in CLUSTER_SCHEMES
    try:
        parts = urlsplit(url)
        port = None if cluster else parts.port
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {shown!r}: {scrub(str(exc), url)}") from None
    if scheme not in ("redis", "rediss", "unix", *CLUSTER_SCHEMES):
        raise ConfigurationError(
            "a Redis URL starts with redis://, rediss://, unix:// or redis+cluster://, "
            f"not {scheme!r}: {shown!r}"
        )
    if port == 0:
        raise ConfigurationError(f"port 0 is not a Redis port in {shown!r}")
    options = parse_qsl(parts.query, keep_blank_values=True)
    db_option = [v for k, v in options if k == "db"]
    if cluster:
        cluster_nodes(url)
        db_path = unquote(parts.path).strip("/")
        if db_path not in ("", "0") or any(v != "0" for v in db_option):
            raise ConfigurationError(
                f"a Redis Cluster has only database 0, not {db_path or db_option[-1]!r}, "
                f"in {shown!r}"
            )
    elif scheme != "unix":
        db_path = unquote(parts.path).strip("/")
        if db_path and not db_path.isdigit():
            raise ConfigurationError(
                f"the Redis database must be a number (redis://host:6379/0), not "
                f"{db_path!r} in {shown!r}"
            )
        if db_path and db_option and db_option[-1] != db_path:
            raise ConfigurationError(
                f"the Redis database is given twice ({db_path!r} and db={db_option[-1]!r}) "
                f"in {shown!r}"
            )
    elif not parts.path:
        raise ConfigurationError(f"a unix:// Redis URL needs a socket path: {shown!r}")
    for value in db_option:
        if not value.isdigit():
            raise ConfigurationError(
                f"the Redis database must be a number, not db={value!r} in {shown!r}"
            )
    known = _driver_options()
    unknown = sorted({k for k, _ in options if k not in known and k not in OWN_OPTIONS})
    if unknown:
        raise ConfigurationError(
            f"unknown Redis URL option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} in {shown!r}"
        )


def split_options(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` without statekeeper's own options, and those options as keyword
    arguments of :class:`~.backend.RedisBackend`."""
    parts = urlsplit(url)
    kwargs: dict[str, Any] = {}
    mine, keep = split_query(parts.query, OWN_OPTIONS)
    for key, value in mine:
        if key == "prefix":
            kwargs["prefix"] = value
        elif key in ("feed", "evictable"):
            if value not in ("0", "1", "true", "false"):
                raise InvalidArgument(
                    key, f"{key} must be 0, 1, true or false, not {value!r}, in {mask_url(url)!r}"
                )
            kwargs[key] = value in ("1", "true")
        elif key in _INT_OPTIONS:
            kwargs[key] = int_option(key, value, url)
        else:
            kwargs[key] = float_option(
                key,
                value,
                url,
                positive=key in ("connect_timeout", "pool_timeout", "socket_timeout"),
            )
    clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(keep), ""))
    return clean, kwargs
