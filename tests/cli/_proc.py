"""Run the CLI as a user does (a subprocess) and build stores on every engine for it."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from rich.cells import cell_len

from statekeeper import StateTransition, SyncStateStore
from statekeeper.security import Keyring

from ..backends._services import (
    fresh_url,
)

ENGINES = ["sqlite", "postgresql", "redis"]


def cli_env(columns: int = 80, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STATEKEEPER_") and k not in ("FORCE_COLOR", "TTY_INTERACTIVE")
    }
    env.update(
        {"COLUMNS": str(columns), "LINES": "40", "NO_COLOR": "1", "TERM": "dumb", "TZ": "UTC"}
    )
    env.update(extra)
    return env


def sk(
    *args: str, columns: int = 80, cwd: Path | None = None, input: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS`` in a subprocess (COLUMNS=80, no colour, UTC)."""
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        env=cli_env(columns, **env),
        cwd=cwd,
        input=input,
        timeout=120,
    )


def run_in_process(
    args: Sequence[str], env: dict[str, str], cwd: Path | None = None, input: str | None = None
) -> tuple[int, str, str]:
    """``statekeeper ARGS`` run by the console script's own entry point in this process,
    with exactly ``env`` as its environment: (exit code, stdout, stderr).

    For help screens and refusals: a fresh interpreter costs about a second (minutes
    over a corpus of cases on a loaded machine). The tests of start-up, imports and
    terminals, and a real run of every command, keep using a real process."""
    from click.testing import CliRunner

    from statekeeper.cli.app import main

    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    overrides.update(env)
    code: int
    with (
        contextlib.chdir(cwd or Path.cwd()),
        CliRunner().isolation(input=input, env=overrides) as (out, err, _),
        _as_in_a_fresh_process(),
    ):
        time.tzset()  # local times follow env's TZ, as in a fresh process
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        result = code, out.getvalue().decode(), err.getvalue().decode()
    time.tzset()  # back to this process's own TZ
    return result


@contextlib.contextmanager
def _as_in_a_fresh_process() -> Iterator[None]:
    """Logging as a fresh ``statekeeper`` process has it, for the run inside: the root
    logger at WARNING without pytest's capturing handlers, so a library's warning (a
    driver's, a pool's, asyncio's) goes to the run's stderr through logging's
    last-resort handler, as in a terminal, and a test of "one line on stderr" sees it.
    (Python warnings stay under pytest's filters: the suite's deprecation errors
    apply inside the run too.)"""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def sk_in_process(
    *args: str, columns: int = 80, cwd: Path | None = None, input: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """:func:`sk` in this process (:func:`run_in_process`), with the same environment."""
    code, stdout, stderr = run_in_process(args, cli_env(columns, **env), cwd, input)
    return subprocess.CompletedProcess(["statekeeper", *args], code, stdout, stderr)


#: runs the CLI like the console script, then prints the loaded modules (``-X
#: importtime`` cannot be used: it does not see ``importlib.import_module``)
_PROBE = """
import json, sys
from statekeeper.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported(*argv: str) -> set[str]:
    """The modules ``statekeeper ARGV`` has loaded when it exits."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    return set(json.loads(result.stderr.splitlines()[-1]))


#: a command the user is told to run ("inspect it: statekeeper history ..."): printed on
#: one line whatever its width, so that it pastes whole (cli/app.py print_command)
TOLD = re.compile(r"[a-z ]+: statekeeper ")


def assert_fits(text: str, width: int = 80) -> None:
    """No line wider than ``width`` (a command the user is told to run aside: never
    wrapped) and no truncation ellipsis."""
    for line in text.splitlines():
        assert TOLD.match(line) or cell_len(line) <= width, f"{cell_len(line)} columns: {line!r}"
        assert "…" not in line, f"truncated: {line!r}"


def populate(url: str, base: float | None = 0.0, keyring: Keyring | None = None) -> None:
    """The three agents every CLI test reads (see the ``db`` fixture of conftest.py).

    Timestamps come from a clock at base+1000, base+2000, … (the real clock when
    ``base`` is None); ``keyring`` encrypts the store."""
    ticks = itertools.count(1)
    clock = time.time if base is None else (lambda: base + 1000.0 * next(ticks))
    store = SyncStateStore(url, clock=clock, keyring=keyring, snapshot_every=3)
    try:
        a = store.agent("alpha", initial_data={"task": "research"})
        a.transition(StateTransition.START_PROCESSING)
        a.transition(StateTransition.CALL_TOOL, {"tool": "search", "call_id": "c1"})
        a.data["results"] = {"c1": {"hits": 3}}
        a.transition(StateTransition.RECEIVE_RESULT, {"tool": "search", "call_id": "c1"})
        store.save("beta", {"n": 1})
        store.save("beta", {"n": 2})
        g = store.agent("gamma")
        g.transition(StateTransition.START_PROCESSING)
        g.transition(StateTransition.COMPLETE)
    finally:
        store.close()


@pytest.fixture
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store on the engine ``request.param`` (own schema / key prefix)."""
    with fresh_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def engine_url(empty_url: str) -> str:
    """A store on ``request.param``'s engine with the three agents of :func:`populate`."""
    populate(empty_url)
    return empty_url


def ctrl_c_reaches_it() -> None:
    """(A ``preexec_fn``.) Give a child the default Ctrl-C: a test run started in the
    background by a shell (``cmd &``, ``nohup``) ignores SIGINT, and a child inherits
    that, so a SIGINT sent to test a Ctrl-C would not reach it at all (a CI run so
    started hung 120 s in ``metrics record``'s test)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_at_gate(
    argv: Sequence[str], blocked: Path, go: Path, signum: int, *, columns: int = 300
) -> tuple[int, str, str]:
    """Run ``argv`` (a Python child made to create ``blocked`` at the point under test,
    then wait for ``go``), send it ``signum`` once it is there, let it go on, and return
    its (exit code, stdout, stderr): a stop delivered at one exact point, by a condition,
    never by a duration."""
    child = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"COLUMNS": str(columns), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        deadline = time.monotonic() + 120  # a guard, never a synchronisation
        while not blocked.exists():  # wait for the condition
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signum)
        go.touch()
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, out, err
