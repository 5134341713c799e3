"""The CLI against servers that are down, misconfigured or silent, and with passwords.

Each case runs ``statekeeper`` as a subprocess: one line on stderr with the server's
own reason, exit code 2, no traceback, no password. The old behaviour retried for
12-32 s and printed screens of warnings; without measuring time, the silent listener
counts the connections it receives (a retry loop shows up as many of them), the error
names the configured timeout, and the subprocess ``timeout=`` is the guard on a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    SilentServer,
    delete_prefix,
    drop_schema,
    free_port,
    host_port,
    namespace,
    require_postgres,
    require_redis,
)

SECRET = "Pw-d0-not-print"
# At most this many connections per CLI run to the silent server: one, plus one for
# psycopg's sslmode=prefer fallback. A retry loop makes many more.
MAX_ATTEMPTS = 2


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    base.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return subprocess.run(  # the timeout is the hang guard, not a measurement
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=base,
    )


@pytest.fixture(scope="module")
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _url(kind: str, silent: int) -> str:
    pg, rd = host_port(POSTGRES_DSN), host_port(REDIS_URL)
    return {
        "pg-closed-port": f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/test",
        "pg-missing-db": f"postgresql://postgres:{SECRET}@{pg}/sk_no_such_database",
        "pg-unknown-option": f"postgresql://postgres:{SECRET}@{pg}/test?sk_bogus_option=1",
        "pg-unresolvable": f"postgresql://postgres:{SECRET}@no-such-host.invalid/test",
        "pg-silent": f"postgresql://postgres:{SECRET}@127.0.0.1:{silent}/test",
        "redis-closed-port": f"redis://:{SECRET}@127.0.0.1:{free_port()}/0",
        "redis-silent": f"redis://:{SECRET}@127.0.0.1:{silent}/0",
        "redis-db-not-a-number": f"redis://:{SECRET}@{rd}/abc",
        "redis-unknown-option": f"redis://:{SECRET}@{rd}/0?colour=blue",
    }[kind]


CASES = {
    "pg-closed-port": "Connection refused",
    "pg-missing-db": 'database "sk_no_such_database" does not exist',
    "pg-unknown-option": 'invalid URI query parameter: "sk_bogus_option"',
    "pg-unresolvable": "no-such-host.invalid",
    "pg-silent": "no answer within 3s",  # the CLI's default --connect-timeout
    "redis-closed-port": "Connect call failed",
    "redis-silent": "no answer within 3s",
    "redis-db-not-a-number": "database must be a number",
    "redis-unknown-option": "unknown Redis URL option 'colour'",
}


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("command", ["agents", "stats"])
def test_unreachable_or_misconfigured_server_is_one_line_and_no_retries(
    kind: str, command: str, silent: SilentServer
) -> None:
    if kind in ("pg-missing-db", "pg-unknown-option"):
        require_postgres()
    before = silent.attempts
    proc = _cli(command, "--db", _url(kind, silent.port))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert CASES[kind] in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert SECRET not in proc.stderr + proc.stdout
    assert ":***@" in lines[0]
    if kind.endswith("-silent"):  # gave up after one timeout, no retry loop
        assert 1 <= silent.attempts_since(before) <= MAX_ATTEMPTS, silent.attempts - before


def test_connect_timeout_option_and_environment(silent: SilentServer) -> None:
    url = _url("pg-silent", silent.port)
    before = silent.attempts
    proc = _cli("--connect-timeout", "0.5", "agents", "--db", url)
    assert proc.returncode == 2 and "no answer within 0.5s" in proc.stderr
    assert 1 <= silent.attempts_since(before) <= MAX_ATTEMPTS
    before = silent.attempts
    proc = _cli(
        "agents",
        "--db",
        _url("redis-silent", silent.port),
        env={"STATEKEEPER_CONNECT_TIMEOUT": "0.5"},
    )
    assert proc.returncode == 2 and "no answer within 0.5s" in proc.stderr
    assert 1 <= silent.attempts_since(before) <= MAX_ATTEMPTS
    # the URL's own connect_timeout wins over the default
    proc = _cli("agents", "--db", url + "?connect_timeout=0.25")
    assert proc.returncode == 2 and "no answer within 0.25s" in proc.stderr


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_a_bad_connect_timeout_is_a_usage_error(bad: str) -> None:
    proc = _cli("--connect-timeout", bad, "agents", "--db", "memory://")
    assert proc.returncode == 2
    assert "--connect-timeout" in proc.stderr and "Traceback" not in proc.stderr


def test_stats_and_errors_mask_the_password(tmp_path: Path) -> None:
    require_postgres()
    schema = namespace(tmp_path)
    pg = host_port(POSTGRES_DSN)
    url = f"postgresql://postgres:{SECRET}@{pg}/test?schema={schema}"  # trust: any password

    async def populate() -> None:
        async with StateStore(url) as store:
            await store.save("a1", {"n": 1})

    import asyncio

    drop_schema(schema)
    try:
        asyncio.run(populate())
        proc = _cli("stats", "--db", url)
        assert proc.returncode == 0, proc.stderr
        assert f"postgresql://postgres:***@{pg}/test" in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr
        proc = _cli("show", "nobody", "--db", url)
        assert proc.returncode == 1 and SECRET not in proc.stdout + proc.stderr
    finally:
        drop_schema(schema)


def test_redis_store_with_a_password_in_the_url(tmp_path: Path) -> None:
    require_redis()
    prefix = namespace(tmp_path) + ":"
    rd = host_port(REDIS_URL)
    url = f"redis://:{SECRET}@{rd}/0?prefix={prefix}"  # the shared server ignores it

    async def populate() -> None:
        async with StateStore(url) as store:
            await store.save("a1", {"n": 1})

    import asyncio

    try:
        asyncio.run(populate())
        proc = _cli("stats", "--db", url)
        assert proc.returncode == 0, proc.stderr
        assert f"redis://:***@{rd}/0" in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr
    finally:
        delete_prefix(prefix)
