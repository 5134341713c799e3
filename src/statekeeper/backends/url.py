"""Choosing a backend by URL.

================================================  =========================================
``memory://``                                     :class:`~.memory.MemoryBackend`
``sqlite:///rel.db``, ``sqlite:////abs.db``       :class:`~.sqlite.SQLiteBackend`
(a bare path is a SQLite file too;                (``sqlite+pysqlite://`` too)
``sqlite://`` and ``sqlite:///:memory:``          :class:`~.memory.MemoryBackend`, as in
are a private in-memory store)                    SQLAlchemy: nothing is kept after close
``postgresql://user@host:5432/db?…``              :class:`~.postgres.PostgresBackend`
(``postgres://``, ``postgresql+psycopg://``)      (extra ``postgres``)
``redis://host:6379/0?prefix=sk:&ttl=3600``       :class:`~.redis.RedisBackend`
(``rediss://`` for TLS, ``unix://``)              (extra ``redis``)
``redis+cluster://h1:7000,h2:7001/?prefix=sk:``  :class:`~.redis.RedisBackend` on a Redis
(``rediss+cluster://`` for TLS)                   Cluster (sharded layout: docs/scale.md)
``s3://bucket/prefix?endpoint_url=http://…``      :class:`~.s3.S3Backend` (extra ``s3``)
``tiered://?hot=…&durable=…&cold=…``              :class:`~.tiered.TieredBackend`
================================================  =========================================

The engines behind an extra are imported only when their URL is used; a missing extra
raises :class:`~statekeeper.errors.BackendUnavailable` naming the ``pip install``
command. In a ``tiered://`` URL each tier is itself a URL, percent-encoded when it
contains ``&`` (:func:`tiered_url` builds one).

Every error about a URL names the part that is wrong and shows the URL with its
password masked (:func:`~.redact.mask_url`). ``connect_timeout`` (seconds) bounds how
long a server backend (PostgreSQL, Redis, S3, and the tiers of a tiered one) may take to
answer when it is first used; a server that cannot be reached in that time, or refuses
the connection, raises :class:`~statekeeper.errors.BackendUnavailable` with its reason.
Precedence: the ``connect_timeout`` argument, then the URL's own ``?connect_timeout=``,
then ``$STATEKEEPER_CONNECT_TIMEOUT``, then the backend's default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit

from ..errors import BackendUnavailable, ConfigurationError
from .base import Backend
from .redact import mask_url

__all__ = ["CONNECT_TIMEOUT_ENV", "is_in_memory", "open_backend", "tiered_url"]

#: environment variable with the default connect timeout (seconds) of server backends
CONNECT_TIMEOUT_ENV = "STATEKEEPER_CONNECT_TIMEOUT"


def _check_timeout(value: float, source: str) -> float:
    if not (isinstance(value, int | float) and value > 0 and value != float("inf")):
        raise ConfigurationError(f"{source} must be a number of seconds > 0, not {value!r}")
    return float(value)


def _timeout_for(url: str, given: float | None) -> dict[str, float]:
    """The ``connect_timeout`` override for a server URL (see the precedence above)."""
    if given is not None:
        return {"connect_timeout": _check_timeout(given, "connect_timeout")}
    if "connect_timeout" in split_query(url):
        return {}
    raw = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigurationError(
            f"${CONNECT_TIMEOUT_ENV} must be a number of seconds > 0, not {raw!r}"
        )
    return {"connect_timeout": value}


_EXTRA = {"postgres": "PostgreSQL", "redis": "Redis", "s3": "S3"}


def _missing(extra: str, exc: ImportError) -> BackendUnavailable:
    return BackendUnavailable(
        f"the {_EXTRA[extra]} backend needs an optional dependency that is not installed "
        f"({exc.name or exc}): pip install 'statekeeper[{extra}]'"
    )


def open_backend(
    url: str,
    *,
    connect_timeout: float | None = None,
    readonly: bool = False,
    options: Mapping[str, Any] | None = None,
) -> Backend:
    """Build the backend a URL names (see the module documentation for the forms).

    ``sqlite:///relative.db`` and ``sqlite:////abs/path.db`` follow SQLAlchemy's
    convention; a bare path (no scheme) is taken as a SQLite file. Query options:
    ``?synchronous=NORMAL``, ``?busy_timeout=10`` and ``?inline_writes=false`` for
    SQLite; for the others see their classes (:func:`~.postgres.parse_postgres_url`,
    :meth:`~.redis.RedisBackend.from_url`, :meth:`~.s3.S3Backend.from_url`,
    :meth:`~.tiered.TieredBackend.from_url`). ``connect_timeout`` overrides the one
    the URL gives (or the backend's default) for PostgreSQL and Redis, tiers included.
    :meth:`~.tiered.TieredBackend.from_url`).

    ``readonly=True`` opens the store for reading only and never creates one: SQLite
    with a ``mode=ro`` connection, PostgreSQL without DDL in read-only sessions, Redis
    without TTL refreshes or index tidying, S3 without creating the bucket, and
    ``tiered://`` with its durable and cold tiers read-only and its hot tier unused
    (reads come from the durable tier, or the cold tier for a demoted agent; nothing
    is filled, rehydrated or demoted); every write raises
    :class:`~statekeeper.errors.ReadOnlyStore`, and something that is not a
    statekeeper store raises :class:`~statekeeper.errors.NotAStore` (SQLite at once,
    the others on first use or :meth:`~.base.Backend.ensure_store`; a tiered store is
    judged by its durable tier, an S3 one by its bucket and prefix). ``memory://`` is
    accepted as is.

    ``options`` are keyword arguments for the engine's ``from_url`` (PostgreSQL, Redis
    and S3: e.g. ``{"schema": "app"}`` or ``{"prefix": "app:"}``), for settings a URL
    cannot carry; any other engine refuses them with
    :class:`~statekeeper.errors.ConfigurationError`.
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError("a backend URL must be a non-empty string")
    if connect_timeout is not None:
        connect_timeout = _check_timeout(connect_timeout, "connect_timeout")
    extra = dict(options or {})
    if extra and not _takes_options(url):
        scheme = url.split("://", 1)[0].lower() if "://" in url else "sqlite"
        raise ConfigurationError(
            f"engine options ({', '.join(sorted(extra))}) are not supported for "
            f"{scheme!r} URLs, only for postgresql, redis and s3"
        )
    if "://" not in url:
        _refuse_half_url(url)
        from .sqlite import SQLiteBackend

        return SQLiteBackend(url, readonly=readonly)
    refuse_reserved_in_password(url)
    try:
        urlsplit(url)
    except ValueError as exc:  # an unclosed [IPv6 host: every engine's parser stops there
        raise ConfigurationError(f"malformed URL {mask_url(url)!r}: {exc}") from None
    scheme = url.split("://", 1)[0].lower()
    base = scheme.split("+", 1)[0]
    timeout = _timeout_for(url, connect_timeout)
    if scheme == "memory":
        if url.split("://", 1)[1]:  # nothing configures it: a typo must not pass as one
            raise ConfigurationError(
                f"an in-memory store takes no name or options: {mask_url(url)!r} (use 'memory://')"
            )
        from .memory import MemoryBackend

        return MemoryBackend()
    if base == "sqlite":
        return _sqlite(url, readonly)
    if base in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresBackend
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise _missing("postgres", exc) from exc
        return PostgresBackend.from_url(url, readonly=readonly, **{**timeout, **extra})
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        try:
            from .redis import RedisBackend
        except ImportError as exc:  # pragma: no cover
            raise _missing("redis", exc) from exc
        return RedisBackend.from_url(url, readonly=readonly, **{**timeout, **extra})
    if scheme == "s3":
        try:
            from .s3 import S3Backend
        except ImportError as exc:  # pragma: no cover
            raise _missing("s3", exc) from exc
        return S3Backend.from_url(url, readonly=readonly, **{**timeout, **extra})
    if scheme == "tiered":
        from .tiered import TieredBackend

        return TieredBackend.from_url(url, connect_timeout=connect_timeout, readonly=readonly)
    raise ConfigurationError(
        f"unknown backend scheme {scheme!r} in {mask_url(url)!r} (known: memory, sqlite, "
        "postgresql, redis, rediss, redis+cluster, unix, s3, tiered)"
    )


#: how each engine's URL is spelled, for a value that names a scheme without ``://``
_SPELLINGS = {
    "memory": "memory://",
    "sqlite": "sqlite:///relative.db or sqlite:////absolute/path.db, or a bare path",
    "postgresql": "postgresql://user@host:5432/db",
    "postgres": "postgresql://user@host:5432/db",
    "redis": "redis://host:6379/0, or rediss:// for TLS",
    "rediss": "rediss://host:6379/0",
    "unix": "unix:///path/to/redis.sock",
    "s3": "s3://bucket/prefix",
    "tiered": "tiered://?hot=…&durable=…",
}
#: a libpq key/value connection string (``host=db dbname=app password=…``)
_CONNINFO = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|service|sslmode)\s*=", re.IGNORECASE
)
#: ``user:password@host`` with no scheme, or a scheme mistyped (``postgresql//u:p@h``)
_BARE_CREDENTIALS = re.compile(r"(?:[A-Za-z][A-Za-z0-9.+-]*:?/{1,2})?[^\s:/@]*:[^\s/@]+@[^\s/@]+")
_HALF_URL = re.compile(r"([A-Za-z][A-Za-z0-9.-]*)(\+[A-Za-z0-9.+-]*)?:(?!//)")


def refuse_reserved_in_password(url: str) -> None:
    """A password holding ``/ ? # [ ]`` as typed is not one to a URL parser: urlsplit
    cut ``postgresql://app:p#ss@db/x`` at the ``#`` and the engines' errors quoted the
    URL (or the piece they took for a port) with the password in it. Refused before any
    engine parses it, naming the URL masked and how to write it; a URL that is valid
    as written (``u:12/34@db``: host ``u``, port 12) is left to the engine.

    LangGraph's databases (``langgraph import`` / ``export``) follow the same rule:
    libpq took ``postgresql://u:p#w@db/x`` whole, the store refused it."""
    from .redact import misparsed_password

    password = misparsed_password(url)
    if password is None or not any(c in password for c in "/?#[]"):
        return  # (a plain password before an unclosed [IPv6 host: "malformed URL")
    try:
        parts = urlsplit(url)
        # (a port that is a number and no "@" in a fragment: maybe a URL meant as
        # written, host:port/path?query=a@b; a fragment means nothing to an engine)
        valid = parts.port is not None and "@" not in parts.fragment
    except ValueError:
        valid = False
    if not valid:
        raise ConfigurationError(
            f"the password in {mask_url(url)!r} holds a character URLs reserve "
            "(/ ? # [ ]): percent-encode it (/ as %2F, ? as %3F, # as %23, [ as %5B,"
            " ] as %5D)"
        )


def _refuse_half_url(value: str) -> None:
    """Refuse ``sqlite:/x.db``, ``redis:host``...: a known scheme without ``://`` is a
    mistyped URL, not a relative file named after it. So is a libpq key/value string
    (``host=db password=…``) and ``user:password@host``: ``init`` created a SQLite file
    named after them, password and all, and printed its name."""
    if _CONNINFO.match(value) or _BARE_CREDENTIALS.match(value):
        raise ConfigurationError(
            f"{mask_url(value)!r} is not a URL (nor a file a store should be named"
            " after): give the server's URL, postgresql://user:password@host:5432/db or"
            " redis://:password@host:6379/0"
        )
    match = _HALF_URL.match(value)
    if match is None or match.group(1).lower() not in _SPELLINGS:
        return
    scheme = match.group(1).lower()
    raise ConfigurationError(
        f"malformed {scheme} URL {mask_url(value)!r}: the scheme needs '://' "
        f"(use {_SPELLINGS[scheme]})"
    )


def is_in_memory(url: str) -> bool:
    """Whether ``url`` names a private in-memory store, which :func:`open_backend` opens
    empty and which keeps nothing after close: ``memory://``, or SQLAlchemy's spellings
    ``sqlite://``, ``sqlite:///`` and ``sqlite:///:memory:``."""
    if not isinstance(url, str) or "://" not in url:
        return False
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "memory":
        return True
    return scheme.split("+", 1)[0] == "sqlite" and rest.split("?", 1)[0] in ("", "/", "/:memory:")


def _takes_options(url: str) -> bool:
    """Whether the engine of ``url`` accepts ``open_backend(options=...)``."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    return scheme.split("+", 1)[0] in ("postgresql", "postgres", "redis", "rediss", "unix", "s3")


def _sqlite(url: str, readonly: bool = False) -> Backend:
    from .sqlite import SQLiteBackend

    parts = urlsplit(url)
    rest = url.split("://", 1)[1].split("?", 1)[0]
    if "@" in parts.netloc:
        # A file has no user or password: taken as a path, ``sqlite://me:PW@/x.db``
        # would open (or create) a file under a folder named after the password.
        raise ConfigurationError(
            f"a SQLite URL takes no user or password: {mask_url(url)!r} "
            "(use sqlite:///relative.db or sqlite:////absolute.db)"
        )
    path = unquote(rest)
    if path.startswith("/"):
        path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if is_in_memory(url):
        # SQLAlchemy's spellings of a private in-memory database
        if options:
            raise ConfigurationError(
                f"unknown options {sorted(options)} for an in-memory store in {mask_url(url)!r}"
            )
        from .memory import MemoryBackend

        return MemoryBackend()
    if not path:
        raise ConfigurationError(f"no database path in {mask_url(url)!r}")
    sync = options.pop("synchronous", "FULL").upper()
    try:
        timeout = float(options.pop("busy_timeout", "30"))
    except ValueError as exc:
        raise ConfigurationError(f"busy_timeout must be a number in {mask_url(url)!r}") from exc
    inline = options.pop("inline_writes", "true").lower()
    if inline not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigurationError(f"inline_writes must be true or false in {mask_url(url)!r}")
    if options:
        raise ConfigurationError(f"unknown sqlite options {sorted(options)} in {mask_url(url)!r}")
    return SQLiteBackend(
        path,
        synchronous=sync,  # type: ignore[arg-type]
        busy_timeout=timeout,
        inline_writes=inline in ("true", "1", "yes"),
        readonly=readonly,
    )


def tiered_url(
    *,
    durable: str,
    hot: str | None = None,
    cold: str | None = None,
    **options: float | str,
) -> str:
    """A ``tiered://`` URL for :func:`open_backend` (each tier URL percent-encoded).

    >>> tiered_url(hot="memory://", durable="sqlite:///a.db?synchronous=NORMAL", idle_after=60)
    'tiered://?hot=memory%3A%2F%2F&durable=sqlite%3A%2F%2F%2Fa.db%3Fsynchronous%3DNORMAL&idle_after=60'
    """
    pairs = [("hot", hot), ("durable", durable), ("cold", cold)]
    pairs += [(k, str(v)) for k, v in options.items()]
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in pairs if v is not None)
    return f"tiered://?{query}"


def split_query(url: str) -> dict[str, str]:
    """The query options of ``url`` as a dict (the last value of a repeated option)."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
