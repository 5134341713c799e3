"""The CLI against servers that are down, misconfigured or silent, and with passwords.

Each case runs ``statekeeper``: one line on stderr with the server's own reason, exit
code 2, no traceback, no password. The old behaviour retried for 12-32 s and printed
screens of warnings; without measuring time, the silent listener counts the
connections it receives (a retry loop shows up as many of them), the error names the
configured timeout, and the subprocess ``timeout=`` is the guard on a hang.

The silent-server cases with the default timeout run as real processes, all four at
once (each waits the default 3 s doing nothing: one after the other they were 12 s
of a test worker's time); ``stats`` on PostgreSQL runs as a real process too. The
other cases run through the console script's entry point in this process
(:func:`._proc.run_in_process`: with a fresh process's logging and warnings, so a
driver's or pool's warnings would show on stderr there as they would in a terminal).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
from ._proc import run_in_process

SECRET = "Pw-d0-not-print"
# At most this many connections per CLI run to the silent server: one, plus one for
# psycopg's sslmode=prefer fallback. A retry loop makes many more.
MAX_ATTEMPTS = 2


def _env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    base.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return base


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS`` in a real process."""
    return subprocess.run(  # the timeout is the hang guard, not a measurement
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(env),
    )


def _cli_here(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS`` through the console script's entry point in this process."""
    code, stdout, stderr = run_in_process(args, _env(env))
    return subprocess.CompletedProcess(["statekeeper", *args], code, stdout, stderr)


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


SILENT = [kind for kind in CASES if kind.endswith("-silent")]
COMMANDS = ["agents", "stats"]


def _one_line_no_secret(proc: subprocess.CompletedProcess[str], kind: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert CASES[kind] in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert SECRET not in proc.stderr + proc.stdout
    assert ":***@" in lines[0]


@pytest.mark.parametrize("kind", [kind for kind in CASES if kind not in SILENT])
@pytest.mark.parametrize("command", COMMANDS)
def test_unreachable_or_misconfigured_server_is_one_line_and_no_retries(
    kind: str, command: str
) -> None:
    if kind in ("pg-missing-db", "pg-unknown-option"):
        require_postgres()
    _one_line_no_secret(_cli_here(command, "--db", _url(kind, free_port())), kind)


def test_a_silent_server_is_one_line_after_the_default_timeout_and_no_retries() -> None:
    """``agents`` and ``stats`` against a PostgreSQL and a Redis URL whose server
    accepts the connection and never answers: real processes, all at once, each with a
    listener of its own (its count of connections is that run's alone)."""
    cases = [(command, kind) for command in COMMANDS for kind in SILENT]
    servers = [SilentServer() for _ in cases]
    try:

        def run(i: int) -> subprocess.CompletedProcess[str]:
            command, kind = cases[i]
            return _cli(command, "--db", _url(kind, servers[i].port))

        with ThreadPoolExecutor(max_workers=len(cases)) as pool:
            procs = list(pool.map(run, range(len(cases))))
        for (command, kind), proc, server in zip(cases, procs, servers, strict=True):
            _one_line_no_secret(proc, kind)
            # gave up after one timeout, no retry loop
            assert 1 <= server.attempts_since(0) <= MAX_ATTEMPTS, (command, kind, server.attempts)
    finally:
        for server in servers:
            server.close()


def test_connect_timeout_option_and_environment(silent: SilentServer) -> None:
    url = _url("pg-silent", silent.port)
    before = silent.attempts
    # in this process: the option and the variable are read by the shared option code
    proc = _cli_here("--connect-timeout", "0.5", "agents", "--db", url)
    assert proc.returncode == 2 and "no answer within 0.5s" in proc.stderr
    assert 1 <= silent.attempts_since(before) <= MAX_ATTEMPTS
    before = silent.attempts
    proc = _cli_here(
        "agents",
        "--db",
        _url("redis-silent", silent.port),
        env={"STATEKEEPER_CONNECT_TIMEOUT": "0.5"},
    )
    assert proc.returncode == 2 and "no answer within 0.5s" in proc.stderr
    assert 1 <= silent.attempts_since(before) <= MAX_ATTEMPTS
    # the URL's own connect_timeout wins over the default
    proc = _cli_here("agents", "--db", url + "?connect_timeout=0.25")
    assert proc.returncode == 2 and "no answer within 0.25s" in proc.stderr


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_a_bad_connect_timeout_is_a_usage_error(bad: str) -> None:
    # usage errors in this process (test_cli_bad_arguments runs refusals in real ones)
    proc = _cli_here("--connect-timeout", bad, "agents", "--db", "memory://")
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
        proc = _cli_here("show", "nobody", "--db", url)  # stats above: a real process
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
        proc = _cli_here("stats", "--db", url)  # PostgreSQL's above: a real process
        assert proc.returncode == 0, proc.stderr
        assert f"redis://:***@{rd}/0" in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr
    finally:
        delete_prefix(prefix)


def test_an_in_process_run_shows_a_librarys_logged_warning_on_its_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The in-process runs above stand for real processes: a driver's or pool's logged
    warning (the "screens of warnings" of old) reaches the run's stderr, as logging's
    last-resort handler prints it in a terminal, and so fails "one line on stderr"."""
    import logging

    from statekeeper.cli import exits

    report = exits.report

    def noisy(exc: BaseException, mask: object = None) -> int:
        logging.getLogger("psycopg.pool").warning("error connecting in 'pool-1'")
        return report(exc, mask)  # type: ignore[arg-type]

    monkeypatch.setattr(exits, "report", noisy)
    proc = _cli_here("show", "nobody", "--db", "memory://")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[0] == "error connecting in 'pool-1'", proc.stderr
    assert len(proc.stderr.splitlines()) == 2, proc.stderr
