"""The typer application and its global options.

The error policy (exit codes, one-line messages, never a traceback) is in
:mod:`.exits`; how commands open stores (read-only, ``--key-file``) is in
:mod:`.stores`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .. import __version__
from .._start import release as release_start_guard
from . import exits
from ._help import HelpGroup
from .stores import KeyFileOption, open_store

if TYPE_CHECKING:
    from types import CodeType, FrameType

    from rich.console import Console
    from typer.core import TyperGroup

#: the store used when neither --db nor $STATEKEEPER_URL is given (the library's
#: ``statekeeper.store.store.DEFAULT_URL``, repeated so that ``--help`` need not
#: import the store; a test keeps them equal)
DEFAULT_URL = "sqlite:///statekeeper.db"

__all__ = [
    "DbOption",
    "JsonOption",
    "KeyFileOption",
    "app",
    "command",
    "err_console",
    "main",
    "open_store",
    "out_console",
    "resolve_url",
    "run",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

app = typer.Typer(
    name="statekeeper",
    cls=HelpGroup,
    help="Inspect, verify and demo durable agent state.\n\n"
    "The store is chosen with --db/--url (a SQLite path or URL such as "
    "sqlite:///agents.db, or memory://); default: $STATEKEEPER_URL, else "
    f"{DEFAULT_URL}.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        "--url",
        metavar="URL",
        help=f"Store URL or SQLite path [default: $STATEKEEPER_URL, else {DEFAULT_URL}]",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ConnectTimeoutOption = Annotated[
    float,
    typer.Option(
        "--connect-timeout",
        metavar="SECONDS",
        min=0.001,
        envvar="STATEKEEPER_CONNECT_TIMEOUT",
        help="Give up on a PostgreSQL/Redis server that does not answer within this "
        "many seconds [default: 3; $STATEKEEPER_CONNECT_TIMEOUT].",
        show_default=False,
    ),
]


@dataclass
class Globals:
    """Options given before the command name."""

    db: str | None = None


@functools.cache
def _out_console_class() -> type[Console]:
    from rich.console import Console

    class _Out(Console):
        def on_broken_pipe(self) -> None:
            # rich's own answer (stdout to /dev/null, then exit code 1) would pass the
            # CLI's exit codes by: the closed pipe goes to exits.classify like any failure
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return _Out


def out_console() -> Console:
    """A console on the current stdout (created per call: tests swap stdout)."""
    return _out_console_class()(highlight=False, soft_wrap=False)


def print_command(console: Console, label: str, *argv: str) -> None:
    """``label: statekeeper ARGV`` as one line, dimmed: a command the user is told to
    run is never wrapped (it is copied from a log or a narrow terminal into a shell),
    and each argument is quoted for a POSIX shell."""
    import shlex

    from ._markup import escape

    command = shlex.join(["statekeeper", *argv])
    console.print(f"[dim]{label}: {escape(command)}[/]", soft_wrap=True)


def err_console() -> Console:
    """A console on the current stderr."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"statekeeper {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: DbOption = None,
    connect_timeout: ConnectTimeoutOption = 3.0,
    principal: Annotated[
        str | None,
        typer.Option(
            "--as",
            metavar="PRINCIPAL",
            help="Act as this principal: every call is checked against the policy "
            "(--policy) and audited [default: $STATEKEEPER_PRINCIPAL].",
            show_default=False,
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            metavar="FILE",
            help="Access policy (TOML) for --as [default: $STATEKEEPER_POLICY].",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            metavar="NS",
            help="Work inside this namespace: agent ids are relative to it and nothing "
            "outside it is seen; commands that work on the whole store refuse it "
            "[default: $STATEKEEPER_NAMESPACE].",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    ctx.obj = Globals(db=db)
    # who the commands act as (read by .stores.open_store), restored afterwards
    for name, value in (
        ("STATEKEEPER_PRINCIPAL", principal),
        ("STATEKEEPER_POLICY", None if policy is None else str(policy)),
        ("STATEKEEPER_NAMESPACE", namespace),
    ):
        if value is not None:
            ctx.call_on_close(functools.partial(_restore_env, name, os.environ.get(name)))
            os.environ[name] = value
    # the library's default for every server backend this command opens (a URL's own
    # ?connect_timeout= still wins); restored afterwards for in-process callers
    previous = os.environ.get("STATEKEEPER_CONNECT_TIMEOUT")
    os.environ["STATEKEEPER_CONNECT_TIMEOUT"] = repr(connect_timeout)
    ctx.call_on_close(functools.partial(_restore_env, "STATEKEEPER_CONNECT_TIMEOUT", previous))


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def global_db(ctx: typer.Context) -> str | None:
    """The --db given before the command name, if any."""
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, Globals) else None
    return obj.db if obj is not None else None


def resolve_url(ctx: typer.Context, db: str | None) -> str:
    """Command --db, else global --db, else $STATEKEEPER_URL, else the default file."""
    return db or global_db(ctx) or os.environ.get("STATEKEEPER_URL") or DEFAULT_URL


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL (or bare path) names; None for other backends."""
    if "://" not in url:
        return Path(url)
    scheme, rest = url.split("://", 1)
    if scheme.lower().split("+", 1)[0] != "sqlite":
        return None
    rest = rest.split("?", 1)[0]
    if rest in ("", "/", "/:memory:"):
        return None  # an in-memory store (SQLAlchemy's spellings)
    return Path(rest[1:] if rest.startswith("/") else rest)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine to completion (on a thread of its own when this
    thread already runs an event loop, e.g. a command invoked from async code)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sk-cli-run") as pool:
        return pool.submit(asyncio.run, coro).result()


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, with a SIGTERM that never lands in the event loop's code.

    :func:`_terminated_as_exit` raises ``SystemExit`` from a signal handler, which
    runs between any two bytecodes of the main thread: inside the loop's own code
    (asyncio's modules) it can drop a task's wake-up (a future done, the callback
    that resumes its task popped and never run), and ``asyncio.run``'s clean-up then
    waits forever for that task to finish its cancellation (``tail -f`` hung after a
    SIGTERM on a loaded machine: the signal lands there more often). So while the
    loop runs: landing in the command's own code (below this coroutine, no asyncio
    frame between) the exit is raised there, as before (its ``finally`` blocks run);
    landing anywhere else the command's task is cancelled, from the loop, and the
    exit raised here once the loop is done."""
    import asyncio
    import signal

    if signal.getsignal(signal.SIGTERM) is not _exit_on_sigterm:
        return asyncio.run(coro)
    stopped: list[int] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        mine = sys._getframe(0).f_code

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            stopped.append(signum)
            if _in_own_code(frame, mine):
                raise SystemExit(128 + signum)
            loop.call_soon_threadsafe(task.cancel)

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return await coro
        finally:
            signal.signal(signal.SIGTERM, previous)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if not stopped:
            raise
        raise SystemExit(128 + stopped[0]) from None
    if stopped:  # the command ended before its cancellation reached it
        raise SystemExit(128 + stopped[0])
    return result


def _in_own_code(frame: FrameType | None, top: CodeType) -> bool:
    """Whether ``frame`` runs below the coroutine whose code is ``top`` with no frame
    of asyncio's (the loop, its futures and tasks, the selector) in between."""
    while frame is not None:
        if frame.f_code is top:
            return True
        module = str(frame.f_globals.get("__name__", ""))
        if module == "selectors" or module.split(".")[0] == "asyncio":
            return False
        frame = frame.f_back
    return False


def _known_urls() -> list[str]:
    """The store URLs this invocation was given (--db before or after the command,
    $STATEKEEPER_URL): their secrets are masked in anything printed."""
    import importlib

    try:  # typer >= 0.29 runs on its own copy of click: ask that one for the context
        contexts = importlib.import_module("typer._click.globals")
    except ImportError:  # older typer runs on the click package
        contexts = importlib.import_module("click.globals")

    urls = [os.environ.get("STATEKEEPER_URL", "")]
    ctx = contexts.get_current_context(silent=True)
    while ctx is not None:
        urls.append(str(ctx.params.get("db") or ""))
        if isinstance(ctx.obj, Globals):
            urls.append(ctx.obj.db or "")
        ctx = ctx.parent
    return [u for u in urls if u]


def masked(text: str) -> str:
    """``text`` with the password of every store URL of this invocation masked."""
    from ..backends.redact import scrub

    for url in _known_urls():
        text = scrub(text, url)
    return text


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as one red line on stderr (credentials masked); return the
    Exit to raise."""
    exits.print_error(masked(message))
    return typer.Exit(code)


def handled(fn: F) -> F:
    """Turn any failure of a command into one line on stderr and its exit code
    (:func:`.exits.classify`); click's own exceptions pass through to click."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with exits.said_warnings(masked):
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, exits.ClickException):
            raise
        except BaseException as exc:
            if isinstance(exc, SystemExit | GeneratorExit):
                raise
            raise typer.Exit(exits.report(exc, masked)) from None

    return wrapper  # type: ignore[return-value]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """Within: SIGTERM (``timeout``, ``kill``, a service manager) ends the command as
    Ctrl-C does, by an exception (``SystemExit(143)``), so every ``finally`` runs:
    temporary files removed (a decrypted export's), stores closed. The default would
    end the process where it stands. The handler before is put back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # (signals reach the main thread only)
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        if signal.SIGTERM in _ignored:  # ignored to the end (ignore_stops): put back later
            _ignored[signal.SIGTERM] = previous
        else:
            signal.signal(signal.SIGTERM, previous)


#: (what the tree was built from, the tree) of the last :func:`command` build
_built: tuple[tuple[object, ...], TyperGroup] | None = None


def command() -> TyperGroup:
    """The click command tree of :data:`app`, built once per set of registered
    commands and then reused.

    typer builds the tree afresh (every option of every registered command, from the
    functions' signatures) each time it is asked, which is what ``app(...)`` does on
    every run: once a process has loaded every command module that is ~40 ms of CPU
    a run, most of an in-process run of a quick command. The console script builds
    it once either way; a process that runs the CLI many times (a test suite, a
    caller of :func:`main`, workers forked from a process that has built it) reuses
    it. Reuse carries nothing from one run to the next: click keeps a run's state on
    its Context (a fresh one each run), never on the command objects; no part of the
    tree is taken from the environment when it is built (``envvar`` options and the
    commands' own reads of ``os.environ`` happen at each run; the consoles are made
    per run); the root group keeps its per-run state on the run's context
    (:class:`._help.HelpGroup`). A newly registered command (its module imported on
    first use) is a new key, so the next call builds a tree that has it. Two threads
    building at once each get a complete tree (the last one is kept)."""
    global _built
    key = (app.registered_callback, *app.registered_commands, None, *app.registered_groups)
    built = _built
    if built is not None and built[0] == key:
        return built[1]
    tree = typer.main.get_command(app)
    assert isinstance(tree, HelpGroup)
    _built = (key, tree)
    return tree


#: the SIGINT / SIGTERM handlers :func:`ignore_stops` replaced (put back by :func:`main`)
_ignored: dict[int, Any] = {}
#: how many :func:`main` calls are running (ignore_stops acts only inside one: the typer
#: ``app`` called directly — typer's ``CliRunner``, an application embedding the CLI —
#: has no :func:`main` to put the handlers back, and its process kept ignoring Ctrl-C)
_mains = [0]


def ignore_stops() -> None:
    """From now on Ctrl-C and SIGTERM are ignored, to the end of the command (of the
    process, when it is the ``statekeeper`` process): its outcome is decided (a backup
    in place) and a late signal would only make it report a failure, or end the
    process by the signal, after it succeeded. Main thread only, inside :func:`main`
    (else nothing: see :data:`_mains`)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not _mains[0]:
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signum not in _ignored:
            _ignored[signum] = signal.signal(signum, signal.SIG_IGN)


def _heed_stops() -> None:
    """Put back the handlers :func:`ignore_stops` replaced (a command run in-process)."""
    import signal

    while _ignored:
        signum, handler = _ignored.popitem()
        signal.signal(signum, handler)


def stop_signal(exc: BaseException) -> int | None:
    """The signal that stopped the command: SIGINT for Ctrl-C, SIGTERM for the exit
    its handler raises (``app._terminated_as_exit``); None for any other exit."""
    import signal

    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    if isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        return int(signal.SIGTERM)
    return None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``statekeeper``): every failure, usage errors
    included, ends as one line on stderr and an exit code (:mod:`.exits`)."""
    alone = argv is None  # the process is this run (the console script)
    _mains[0] += 1
    try:
        try:
            with exits.held_warnings(masked) as warnings, _terminated_as_exit():
                try:
                    release_start_guard()  # Ctrl-C is a KeyboardInterrupt from here on
                    code = command().main(args=argv, prog_name="statekeeper", standalone_mode=False)
                except exits.NoArgsIsHelpError as exc:
                    typer.echo(exc.ctx.get_help())
                    code = exits.EXIT_USAGE
                except BaseException as exc:
                    if isinstance(exc, SystemExit):
                        raise
                    if alone:  # decided: the line is said whatever comes (a second Ctrl-C)
                        ignore_stops()
                    code = exits.report(exc, masked)
                if alone:  # the command's outcome is decided: a late stop changes nothing
                    ignore_stops()  # (its warnings, the interpreter's exit: no traceback)
        except KeyboardInterrupt as exc:  # landed after the command, before ignore_stops
            if alone:
                ignore_stops()
            code = exits.report(exc, masked)
    finally:
        _mains[0] -= 1
        if not alone:  # run in-process: the caller's handlers back
            _heed_stops()
        # (else the process ends: a command that ignores stops ignores them to its exit)
    code = code if isinstance(code, int) else exits.EXIT_OK
    if code == exits.EXIT_OK:
        exits.print_warnings(warnings)
    sys.exit(code)


# The commands register themselves on ``app`` when their module is imported, which
# the root group (:class:`._help.HelpGroup`) does on first use: see :mod:`.registry`.
