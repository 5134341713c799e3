"""Where the server-backed backend tests find their servers, and private servers they own.

* PostgreSQL: ``$STATEKEEPER_TEST_POSTGRES_DSN`` (default
  ``postgresql://postgres@127.0.0.1:5432/test``). Each test works in its own schema,
  dropped afterwards.
* Redis: ``$STATEKEEPER_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Each
  test works under its own key prefix, deleted afterwards. Fault tests start a
  *second*, private ``redis-server`` on a free loopback port and kill that one.
* S3: a moto server (``python -m moto.server``) started on a free loopback port by the
  test session — a real HTTP endpoint, never an in-process mock. Each test uses its
  own bucket.

Unreachable servers make the tests skip with the reason (or fail when
``STATEKEEPER_REQUIRE_SERVICES=1``), through :func:`tests.conftest.require_service`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from ..conftest import require_service

POSTGRES_DSN = os.environ.get(
    "STATEKEEPER_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STATEKEEPER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

PG_HOW = (
    "start PostgreSQL or point STATEKEEPER_TEST_POSTGRES_DSN at a server "
    "(e.g. postgresql://postgres@127.0.0.1:5432/test)"
)
REDIS_HOW = (
    "start redis-server or point STATEKEEPER_TEST_REDIS_URL at a server "
    "(e.g. redis://127.0.0.1:6379/0)"
)


def namespace(tmp_path: Path, prefix: str = "sk_t_") -> str:
    """A name unique to one test (its tmp_path is unique, even across sessions)."""
    return prefix + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16]


# -- PostgreSQL -------------------------------------------------------------------------


@cache
def postgres_reachable() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        with psycopg.connect(POSTGRES_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:
        return False


def require_postgres() -> None:
    require_service("PostgreSQL", postgres_reachable(), PG_HOW)


def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _pg_bindir() -> str | None:
    found = shutil.which("pg_ctl")
    if found:
        return os.path.dirname(found)
    import glob

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(candidates[-1]) if candidates else None


class PrivatePostgres:
    """A PostgreSQL server owned by one test (``initdb`` in a temp dir, a free loopback
    port), so it can be stopped, crashed and restarted without touching the shared one.
    As root it runs as the ``postgres`` user (initdb refuses root). ``settings`` are
    server options it starts with (``{"max_connections": 6}``: a server that runs out
    of connections)."""

    def __init__(self, settings: dict[str, object] | None = None) -> None:
        self.settings = dict(settings or {})
        bindir = _pg_bindir()
        require_service("PostgreSQL binaries", bindir is not None, "install postgresql")
        assert bindir is not None
        self.bindir = bindir
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sk-pg-")
        self.data = os.path.join(self.dir, "data")
        self._as: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            require_service("runuser", runuser is not None, "needed to run initdb as postgres")
            import pwd

            uid = pwd.getpwnam("postgres").pw_uid
            os.chown(self.dir, uid, -1)
            self._as = [str(runuser), "-u", "postgres", "--"]
        subprocess.run(
            [
                *self._as,
                f"{bindir}/initdb",
                "-D",
                self.data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*self._as, f"{self.bindir}/pg_ctl", "-D", self.data, "-w", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        for name, value in self.settings.items():
            options += f" -c {name}={value}"
        self._ctl("-o", options, "-l", os.path.join(self.dir, "log"), "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown; ``immediate``: a crash (recovery on next start)."""
        self._ctl("-m", mode, "stop")

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (the backends, the WAL writer...)."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        return [postmaster, *map(int, children)]

    def freeze(self) -> list[int]:
        """SIGSTOP every process of the server (its sockets stay open, nothing answers);
        returns them for :meth:`thaw`."""
        frozen = self.processes()
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        return frozen

    def thaw(self, frozen: list[int]) -> None:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(settings: dict[str, object] | None = None) -> Iterator[PrivatePostgres]:
    server = PrivatePostgres(settings)
    try:
        # in the try: a start that failed (pg_ctl gave up waiting on a loaded machine)
        # may have left a postmaster running, and always leaves the data directory
        server.start()
        yield server
    finally:
        server.close()


# -- Redis --------------------------------------------------------------------------------


@cache
def redis_reachable() -> bool:
    try:
        import redis
    except ImportError:
        return False
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def require_redis() -> None:
    require_service("Redis", redis_reachable(), REDIS_HOW)


def delete_prefix(prefix: str, url: str = REDIS_URL) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=_glob_escape(prefix) + "*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


class PrivateRedis:
    """A ``redis-server`` owned by one test, on a free loopback port (no persistence).

    :meth:`kill` SIGKILLs it (the data is gone, as after a crash of a cache);
    :meth:`start` starts it again on the same port.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sk-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        require_service("redis-server binary", exe is not None, "install redis-server")
        assert exe is not None
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--logfile",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not _wait_port(self.port):
            self.kill()
            raise RuntimeError(f"private redis-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    try:
        server.start()  # in the try: a failed start leaves its directory
        yield server
    finally:
        server.close()


# -- S3 (moto's standalone server) -------------------------------------------------------

_moto: dict[str, object] = {}


def _moto_command() -> list[str] | None:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "moto.server"]


def moto_endpoint() -> str:
    """The URL of a moto S3 server on loopback, started once per test process."""
    if "url" in _moto:
        return str(_moto["url"])
    command = _moto_command()
    require_service("moto server", command is not None, "pip install 'moto[server]'")
    assert command is not None
    port = free_port()
    proc = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    ok = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                ok = True
                break
        except Exception:
            time.sleep(0.1)
    if not ok:
        proc.kill()
        require_service("moto server", False, f"moto server did not start on {url}")

    def _stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()

    atexit.register(_stop)
    _moto["url"] = url
    _moto["proc"] = proc
    return url


def s3_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "region_name": "us-east-1",
    }


@contextlib.contextmanager
def fresh_url(engine: str, tmp_path: Path, name: str = "store.db") -> Iterator[str]:
    """The URL of an empty store on ``engine`` unique to the test, removed afterwards:
    ``memory``, ``sqlite`` (a file ``name`` in ``tmp_path``), ``postgresql`` (its own
    schema), ``redis`` (its own key prefix), ``s3`` (its own bucket of the moto server)
    or ``tiered`` (memory → SQLite → S3). The one factory the suite's per-engine
    fixtures share."""
    ns = namespace(tmp_path)
    if engine == "memory":
        yield "memory://"
    elif engine == "sqlite":
        yield f"sqlite:///{tmp_path / name}"
    elif engine in ("postgresql", "postgres"):
        require_postgres()
        try:
            yield f"{POSTGRES_DSN}?schema={ns}"
        finally:
            drop_schema(ns)
    elif engine == "redis":
        require_redis()
        sep = "&" if "?" in REDIS_URL else "?"
        try:
            yield f"{REDIS_URL}{sep}prefix={ns}:"
        finally:
            delete_prefix(f"{ns}:")
    elif engine == "s3":
        try:
            yield s3_url(ns.replace("_", "-"))
        finally:
            drop_bucket(ns.replace("_", "-"))
    elif engine == "tiered":  # memory -> SQLite -> S3: a compacted stream crosses tiers
        from statekeeper.backends.url import tiered_url

        bucket = ns.replace("_", "-")
        durable = f"sqlite:///{tmp_path / name}"
        try:
            yield tiered_url(hot="memory://", durable=durable, cold=s3_url(bucket), idle_after=3600)
        finally:
            drop_bucket(bucket)
    else:
        raise ValueError(f"unknown engine {engine!r}")


def s3_url(bucket: str) -> str:
    """A store in its own bucket of the moto server (credentials in the environment,
    as the AWS chain reads them)."""
    endpoint = moto_endpoint()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    return f"s3://{bucket}/agents?endpoint_url={endpoint}&region=us-east-1&create_bucket=1"


def drop_bucket(bucket: str) -> None:
    import boto3  # type: ignore[import-untyped]

    s3 = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
    with contextlib.suppress(s3.exceptions.NoSuchBucket):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        s3.delete_bucket(Bucket=bucket)


def host_port(url: str) -> str:
    """``host:port`` of a server URL (credentials and database left out)."""
    return url.split("://", 1)[1].split("@", 1)[-1].split("/", 1)[0]


class SilentServer:
    """Accepts TCP connections, never answers, and counts them."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            with self.changed:
                self.held.append(conn)
                self.changed.notify_all()

    @property
    def attempts(self) -> int:
        """Connections taken so far."""
        with self.changed:
            return len(self.held)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()

    def attempts_since(self, before: int) -> int:
        """The connections made since ``attempts`` was ``before``, by a client that has
        given up: the kernel has queued them; wait (a condition) for the thread to take them."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.held) > before, timeout=60)
            return len(self.held) - before


# -- one PostgreSQL schema per conformance class, emptied between its tests -------------

#: conformance tests that need the schema not to exist at all (a reused one is dropped)
NEEDS_NO_SCHEMA = frozenset({"test_readonly_refuses_what_is_not_a_store"})

#: the tables a store keeps rows in (sk_migrations stays: the schema stays current)
_ROW_TABLES = ("sk_events", "sk_snapshots", "sk_idempotency", "sk_leases", "sk_agents")


def empty_schema(schema: str) -> None:
    """Make an existing statekeeper schema hold what a new one holds — no rows, the feed's
    sequence and floor back at their start — in one round trip; a schema that does not
    exist (or is not a store yet) is left alone (the next backend opened creates it).
    Rows are deleted, not truncated: TRUNCATE gives every table and partition new files,
    as costly as creating the schema again."""
    import psycopg
    from psycopg import sql

    s = sql.Identifier(schema)
    deletes = sql.SQL(" ").join(
        sql.SQL("DELETE FROM {s}.{t};").format(s=s, t=sql.Identifier(t)) for t in _ROW_TABLES
    )
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        body = sql.SQL(
            "BEGIN IF to_regclass({migrations}) IS NOT NULL THEN {deletes}"
            " UPDATE {s}.sk_feed_floor SET floor = 0;"
            " PERFORM setval({seq}, 1, false); END IF; END"
        ).format(
            migrations=sql.Literal(sql.Identifier(schema, "sk_migrations").as_string(conn)),
            seq=sql.Literal(sql.Identifier(schema, "sk_feed_seq").as_string(conn)),
            deletes=deletes,
            s=s,
        )
        conn.execute(sql.SQL("DO {}").format(sql.Literal(body.as_string(conn))))


class ReusedPostgresSchema:
    """For a conformance class on PostgreSQL: one schema per class (and xdist worker,
    and test session), created by the first test, emptied with :func:`empty_schema`
    before each test instead of created and dropped per test (creating a schema — its
    tables, partitions, indexes and functions — was most of each test's time), dropped
    after the class. A test in :data:`NEEDS_NO_SCHEMA` gets it dropped first. The hooks
    name it ``self.schema``."""

    schema: str

    #: the start of the schema's name
    schema_prefix = "sk_t_"

    @pytest.fixture(scope="class")
    @classmethod
    def _class_schema(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        require_postgres()
        name = namespace(tmp_path_factory.mktemp("schema"), cls.schema_prefix)
        drop_schema(name)
        yield name
        drop_schema(name)

    @pytest.fixture(autouse=True)
    def _fresh_schema(self, _class_schema: str, request: pytest.FixtureRequest) -> None:
        self.schema = _class_schema
        if request.node.originalname in NEEDS_NO_SCHEMA:
            drop_schema(_class_schema)
        else:
            empty_schema(_class_schema)
