"""Choosing a backend by URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend, open_backend, tiered_url
from statekeeper.errors import ConfigurationError, InvalidArgument


def _close(backend: object) -> None:
    asyncio.run(backend.close())  # type: ignore[attr-defined]


def test_memory_url() -> None:
    backend = open_backend("memory://")
    assert isinstance(backend, MemoryBackend)
    _close(backend)


@pytest.mark.parametrize(
    "url", ["memory://?bogus=1", "memory://?synchronous=OFF", "memory://shared", "memory:///x.db"]
)
def test_a_memory_url_with_a_name_or_options_is_refused(url: str) -> None:
    """Nothing configures an in-memory store: an option or name (a typo, or an option
    meant for another engine) is refused, as SQLite refuses one it does not know."""
    with pytest.raises(ConfigurationError, match="an in-memory store takes no name or options"):
        open_backend(url)


def test_sqlite_absolute_path_and_options(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "abs.db"
    backend = open_backend(f"sqlite:///{path}?synchronous=normal&busy_timeout=2.5")
    try:
        assert isinstance(backend, SQLiteBackend)
        assert backend.path == str(path)
        assert backend.synchronous == "NORMAL"
        assert backend.busy_timeout == 2.5
        assert path.exists()
    finally:
        _close(backend)


def test_sqlite_relative_path_and_bare_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rel = open_backend("sqlite:///rel.db")
    bare = open_backend("bare.db")
    try:
        assert isinstance(rel, SQLiteBackend) and rel.path == "rel.db"
        assert isinstance(bare, SQLiteBackend) and bare.path == "bare.db"
        assert (tmp_path / "rel.db").exists() and (tmp_path / "bare.db").exists()
    finally:
        _close(rel)
        _close(bare)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://host/x",
        "sqlite:///:memory:?synchronous=full",
        "sqlite:///x.db?busy_timeout=soon",
        "sqlite:///x.db?journal=off",
        "sqlite:///x.db?synchronous=sometimes",
    ],
)
def test_bad_urls_are_configuration_errors(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError):
        open_backend(url)
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:///:memory:", "memory://"]
)
def test_sqlalchemy_in_memory_spellings(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    backend = open_backend(url)
    try:
        assert isinstance(backend, MemoryBackend)
    finally:
        _close(backend)
    assert list(tmp_path.iterdir()) == []  # no file named ":memory:"


def test_sqlalchemy_driver_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sqlite = open_backend("sqlite+pysqlite:///rel.db")
    try:
        assert isinstance(sqlite, SQLiteBackend) and sqlite.path == "rel.db"
    finally:
        _close(sqlite)
    pytest.importorskip("psycopg")
    from statekeeper.backends import PostgresBackend

    for scheme in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        backend = open_backend(f"{scheme}://app:pw@db.invalid:5433/agents?schema=s1")
        assert isinstance(backend, PostgresBackend)
        assert backend.dsn == "postgresql://app:pw@db.invalid:5433/agents"
        assert backend.schema == "s1"
        _close(backend)


def test_redis_password_only_url() -> None:
    pytest.importorskip("redis")
    from statekeeper.backends import RedisBackend

    backend = open_backend("redis://:s3cret@cache.invalid:6380/3")
    try:
        assert isinstance(backend, RedisBackend)
        kwargs = backend._client.connection_pool.connection_kwargs  # type: ignore[union-attr]  # not a cluster here
        assert (kwargs["password"], kwargs["port"], kwargs["db"]) == ("s3cret", 6380, 3)
    finally:
        _close(backend)


SECRET = "Pw-d0-not-print"


@pytest.mark.parametrize(
    ("url", "names"),
    [
        (f"redis://:{SECRET}@cache.invalid/abc", ["'abc'", "database must be a number"]),
        (f"redis://u:{SECRET}@cache.invalid:6379/0?db=two", ["db='two'"]),
        (f"redis://:{SECRET}@cache.invalid:63x9/0", ["Port", "63x9"]),
        (
            f"redis://:{SECRET}@cache.invalid:6379/0?colour=blue",
            ["unknown Redis URL option 'colour'"],
        ),
        (f"redis://:{SECRET}@cache.invalid:6379/0?socket_timeout=soon", ["socket_timeout"]),
        (f"redis://:{SECRET}@cache.invalid:6379/0?ttl=forever", ["ttl", "'forever'"]),
        (f"redis://:{SECRET}@cache.invalid:6379/1?db=2", ["given twice"]),
        (f"postgresql://app:{SECRET}@db.invalid:54x2/agents", ["Port", "54x2"]),
        (
            f"postgresql://app:{SECRET}@db.invalid/agents?pool_max_size=many",
            ["pool_max_size", "'many'"],
        ),
        (f"postgresql://app:{SECRET}@db.invalid/agents?connect_timeout=-1", ["connect_timeout"]),
        (f"mysql://app:{SECRET}@db.invalid/agents", ["unknown backend scheme 'mysql'"]),
        (f"tiered://?durable=postgresql://app:{SECRET}@db.invalid/a&colour=blue", ["colour"]),
        # malformed: the tiers without "?", an unclosed IPv6 host
        (f"tiered://hot=redis://:{SECRET}@cache.invalid/0", ["needs a durable tier"]),
        (f"postgresql://app:{SECRET}@[::1/agents", ["malformed URL", "Invalid IPv6"]),
        (f"redis://:{SECRET}@[::1/0", ["malformed URL", "Invalid IPv6"]),
        # a file has no password: not a folder named after it
        (f"sqlite://me:{SECRET}@/agents.db", ["takes no user or password"]),
        (f"sqlite://me:{SECRET}@/agents.db?colour=blue", ["takes no user or password"]),
    ],
)
def test_url_errors_name_the_bad_part_and_never_the_password(url: str, names: list[str]) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigurationError) as info:
        open_backend(url)
    message = str(info.value)
    assert SECRET not in message
    for name in names:
        assert name in message
    assert ":***@" in message


def test_connect_timeout_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    monkeypatch.setenv("STATEKEEPER_CONNECT_TIMEOUT", "1.5")
    chosen = [
        open_backend("postgresql://db.invalid/a"),  # the environment
        open_backend("postgresql://db.invalid/a?connect_timeout=4"),  # the URL wins
        open_backend("postgresql://db.invalid/a?connect_timeout=4", connect_timeout=0.25),
        open_backend("redis://cache.invalid/0"),
        open_backend("redis://cache.invalid/0?connect_timeout=2"),
    ]
    assert [b.connect_timeout for b in chosen] == [1.5, 4.0, 0.25, 1.5, 2.0]  # type: ignore[attr-defined]
    for backend in chosen:
        _close(backend)
    monkeypatch.setenv("STATEKEEPER_CONNECT_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="STATEKEEPER_CONNECT_TIMEOUT"):
        open_backend("postgresql://db.invalid/a")
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        open_backend("memory://", connect_timeout=0)


@pytest.mark.parametrize(
    ("url", "shown", "password"),
    [
        (f"postgresql://u:{SECRET}@db/x", "postgresql://u:***@db/x", SECRET),
        (f"postgresql://u:p@{SECRET}@db/x", "postgresql://u:***@db/x", f"p@{SECRET}"),
        (f"postgresql://u:{SECRET}@[::1]:5432/x", "postgresql://u:***@[::1]:5432/x", SECRET),
        ("postgresql://u@db/x?sslmode=require", "postgresql://u@db/x?sslmode=require", None),
        (f"postgresql://db/x?password={SECRET}", "postgresql://db/x?password=***", SECRET),
        (f"host=db user=u password='{SECRET} x'", "host=db user=u password=***", f"{SECRET} x"),
        (f"s3://b/p?aws_secret_access_key={SECRET}", "s3://b/p?aws_secret_access_key=***", SECRET),
        ("sqlite:///agents.db", "sqlite:///agents.db", None),
        ("agents.db", "agents.db", None),
    ],
)
def test_mask_url(url: str, shown: str, password: str | None) -> None:
    from statekeeper.backends.redact import mask_url, scrub

    assert mask_url(url) == shown
    if password is not None:
        assert SECRET not in scrub(f"failed on {url}: password {password} refused", url)


def test_mask_url_in_a_tiered_url() -> None:
    from statekeeper.backends.redact import mask_url

    url = tiered_url(hot=f"redis://:{SECRET}@cache/0", durable=f"postgresql://u:{SECRET}@db/x")
    masked = mask_url(url)
    assert SECRET not in masked
    assert "redis://:***@cache/0" in masked and "postgresql://u:***@db/x" in masked
    assert masked.startswith("tiered://?hot=redis://:***@cache/0&durable=")


@pytest.mark.parametrize(
    ("url", "option"),
    [
        (f"postgresql://app:{SECRET}@db.invalid/a?pool_max_size=many", "pool_max_size"),
        (f"postgresql://app:{SECRET}@db.invalid/a?partitions=4.5", "partitions"),
        (f"postgresql://app:{SECRET}@db.invalid/a?connect_timeout=0", "connect_timeout"),
        (f"postgresql://app:{SECRET}@db.invalid/a?retry_timeout=-2", "retry_timeout"),
        (f"redis://:{SECRET}@cache.invalid/0?max_connections=lots", "max_connections"),
        (f"redis://:{SECRET}@cache.invalid/0?connect_timeout=0", "connect_timeout"),
        (f"redis://:{SECRET}@cache.invalid/0?ttl=-1", "ttl"),
        (f"redis://:{SECRET}@cache.invalid/0?feed=maybe", "feed"),
    ],
)
def test_a_bad_number_option_is_an_invalid_argument_naming_it(url: str, option: str) -> None:
    """PostgreSQL and Redis read their numeric URL options with one parser: the error
    is typed, its ``argument`` is the option, and the password never shows."""
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    with pytest.raises(InvalidArgument) as info:
        open_backend(url)
    assert info.value.argument == option
    assert option in str(info.value) and SECRET not in str(info.value)


def test_a_sqlite_url_with_a_password_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite://me:PW@/x.db`` was taken as the relative path ``me:PW@/x.db``: a file
    under a folder named after the password. Refused, nothing created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"me:{SECRET}@").mkdir()
    with pytest.raises(ConfigurationError):
        open_backend(f"sqlite://me:{SECRET}@/agents.db")
    assert list((tmp_path / f"me:{SECRET}@").iterdir()) == []
