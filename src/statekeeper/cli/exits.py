"""The CLI's error policy in one place: which failure gets which exit code and which
one-line message.

==========  =====================================================================
exit code   when
==========  =====================================================================
0           success
1           the thing asked about is not there or not right: an unknown agent,
            problems found by ``verify``, ``witness check``, ``audit verify``,
            ``health``, ``migrate``, ``projections status`` or ``retention
            apply``, a missed ``analyze --rto``, a difference under ``diff
            --exit-code``, a failed demo check, a declined confirmation, a
            ``delete --at`` whose agent's head is not the one named
2           a user error: bad usage (unknown option, bad number, date or choice),
            any :class:`~statekeeper.errors.StatekeeperError` (bad URL, not a
            statekeeper store, wrong key, unreadable database, a file statekeeper
            does not own...), a file or folder that is missing or unreadable
3           ``repair``: problems remain that it cannot fix (see :mod:`.repair`)
4           access denied: the principal of ``--as`` may not do this (the
            policy refused it; the refusal is in the audit log; ``retention
            apply`` lists each agent refused and goes on), or a legal hold
            exempts the agent from the purge asked for (``forget``, ``delete``)
70          an internal error (a bug): still one line; ``STATEKEEPER_DEBUG=1``
            shows the traceback
130         interrupted (Ctrl-C)
141         stdout was closed by its reader (``statekeeper agents | head -1``):
            the command stops at once, quietly, as a program killed by SIGPIPE
143         terminated (SIGTERM): the command ends by an exception, as on Ctrl-C,
            so its temporary files are removed and its stores closed
==========  =====================================================================

Every failure is ONE line on stderr (``error: …``), never a traceback. Warnings the
library logs while a command runs (a damaged snapshot passed over, a retried
connection…) are held back: after a successful command each is printed as one
``warning: …`` line; after a failure the error line alone is printed. A warning the
library *issues* (a :class:`~statekeeper.errors.StatekeeperWarning`: a key file other
users may read…) is said at once, as one ``warning: …`` line, whatever follows: it is
about something the user must fix even when the command then fails.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer

from ..errors import (
    AccessDenied,
    AgentLost,
    AgentNotFound,
    AgentOnHold,
    HeadMoved,
    StatekeeperError,
    StatekeeperWarning,
)

try:  # typer >= 0.20 ships its own copy of click
    from typer._click import exceptions as _click_exceptions
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]

ClickException = _click_exceptions.ClickException
UsageError = _click_exceptions.UsageError
NoArgsIsHelpError = _click_exceptions.NoArgsIsHelpError

__all__ = [
    "EXIT_DENIED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "classify",
    "held_warnings",
    "print_error",
    "report",
]

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_DENIED = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
#: 128 + SIGPIPE: what the shell reports for ``cat``, ``git log``... when the reader of
#: their stdout goes away (``| head -1``)
EXIT_PIPE = 141

DEBUG_ENV = "STATEKEEPER_DEBUG"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _os_message(exc: OSError) -> str:
    what = exc.strerror or str(exc) or type(exc).__name__
    where = exc.filename if exc.filename is not None else None
    if where is None:
        return what
    if exc.filename2 is not None:
        return f"{what}: {where} -> {exc.filename2}"
    return f"{what}: {where}"


def _usage_message(exc: UsageError) -> str:
    ctx = exc.ctx
    hint = ""
    if ctx is not None:
        hint = f" (see '{ctx.command_path} --help')"
    return exc.format_message() + hint


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``| head -1`` has read
    enough): a write to it fails with EPIPE."""
    import select

    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
    except (AttributeError, ValueError, OSError):
        return False
    if not hasattr(select, "poll"):  # pragma: no cover - Windows: no SIGPIPE there
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(mask & select.POLLERR for _, mask in poller.poll(0))


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that nothing written later (the interpreter's
    own flush at exit included) fails on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
    finally:
        os.close(devnull)


def classify(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message for a failure."""
    if isinstance(exc, BrokenPipeError) and exc.errno == errno.EPIPE and stdout_closed():
        return EXIT_PIPE, ""
    if isinstance(exc, AgentNotFound | HeadMoved):  # (not there, or not the one named)
        return EXIT_NOT_FOUND, str(exc)
    if isinstance(exc, AccessDenied | AgentOnHold):
        return EXIT_DENIED, str(exc)
    if isinstance(exc, AgentLost):  # the commands that take the next step
        import shlex

        return EXIT_USAGE, (
            f"{exc} (`statekeeper delete {shlex.quote(exc.agent_id)} --yes` acknowledges"
            " it; `statekeeper verify` lists every lost agent)"
        )
    if isinstance(exc, StatekeeperError):
        # (what the failed command did about it, added on the way up: an agent a
        # failed import or restore had partly written, deleted again)
        notes = getattr(exc, "__notes__", ())
        return EXIT_USAGE, "; ".join([str(exc), *notes])
    if isinstance(exc, UsageError):
        return EXIT_USAGE, _usage_message(exc)
    if isinstance(exc, ClickException):
        return exc.exit_code, exc.format_message()
    if isinstance(exc, typer.Abort):
        return EXIT_NOT_FOUND, "aborted"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(exc, OSError):
        return EXIT_USAGE, _os_message(exc)
    if isinstance(exc, UnicodeError):  # a text file given where it is not text
        return EXIT_USAGE, f"cannot decode input: {exc}"
    return (
        EXIT_INTERNAL,
        f"internal error: {type(exc).__name__}: {exc} (this is a bug; run with "
        f"{DEBUG_ENV}=1 for the traceback)",
    )


def _stderr() -> Any:
    from rich.console import Console  # rich only when something is printed

    return Console(stderr=True, highlight=False)


def print_error(message: str) -> None:
    """``error: message`` as one red line on stderr (never wrapped)."""
    from ._markup import escape

    console = _stderr()
    console.print(f"[bold red]error:[/] [red]{escape(_one_line(message))}[/]", soft_wrap=True)


def report(exc: BaseException, mask: Callable[[str], str] | None = None) -> int:
    """Print ``exc`` as one line on stderr (through ``mask``, which hides
    credentials); return its exit code."""
    code, message = classify(exc)
    if code == EXIT_PIPE:  # nobody reads any more: nothing to say, and no one to say it to
        silence_stdout()
        return code
    if code == EXIT_INTERNAL and os.environ.get(DEBUG_ENV):
        # through ``mask`` as the line is: the traceback repeats the message (and its
        # chain's), which may quote the store URL
        shown = "".join(traceback.format_exception(exc))
        sys.stderr.write(mask(shown) if mask is not None else shown)
    print_error(mask(message) if mask is not None else message)
    return code


class _Held(logging.Handler):
    def __init__(self, mask: Callable[[str], str] | None = None) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.mask = mask

    def emit(self, record: logging.LogRecord) -> None:
        if self.mask is not None:  # (now: the command's --db is known while it runs)
            record.msg, record.args = self.mask(record.getMessage()), None
        self.records.append(record)


@contextmanager
def held_warnings(
    mask: Callable[[str], str] | None = None,
) -> Iterator[list[logging.LogRecord]]:
    """Hold the library's log records (WARNING and up) while a command runs; the
    caller prints them (:func:`print_warnings`) if the command succeeded. ``mask``
    hides credentials in them (and in the warnings said at once)."""
    logger = logging.getLogger("statekeeper")
    handler = _Held(mask)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = bool(os.environ.get(DEBUG_ENV))
    try:
        with said_warnings(mask):  # (the library's warnings, as opposed to its log)
            yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


#: loggers of the libraries a command drives whose warnings are the user's to see (a
#: LangGraph checkpoint holding a type the serializer will not rebuild): said as the
#: CLI's own ``warning:`` lines, not as bare lines from logging's last resort
_SAID_LOGGERS = ("langgraph",)


class _Said(logging.Handler):
    """Says each WARNING record of a library's logger as one ``warning: …`` line."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.say(record.getMessage())
        except Exception:  # a record that cannot be said: logging's own way
            self.handleError(record)


@contextmanager
def said_warnings(mask: Callable[[str], str] | None = None) -> Iterator[None]:
    """Within: each warning a command meets is said at once as one ``warning: …`` line
    on stderr (each text once, however often it is issued: a key file read twice is
    one line), never in Python's ``file:line: Category: text`` form — the library's
    :class:`~statekeeper.errors.StatekeeperWarning` as its text, another category
    (a library's, a deprecation shown under ``-W``) followed by its name — and so are
    the WARNING records of the libraries in :data:`_SAID_LOGGERS` (LangGraph's
    serializer, during ``langgraph import/export`` and ``serve``)."""
    said: set[str] = set()

    def say(text: str) -> None:
        text = _one_line(mask(text) if mask is not None else text)
        if text not in said:
            said.add(text)
            print_warning(text)

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        ours = issubclass(category, StatekeeperWarning)
        say(str(message) if ours else f"{message} ({category.__name__})")

    loggers = [logging.getLogger(name) for name in _SAID_LOGGERS]
    # (nested: the outer one says them already)
    fresh = [lg for lg in loggers if not any(isinstance(h, _Said) for h in lg.handlers)]
    handler = _Said(say)
    kept = [(lg, lg.propagate) for lg in fresh]
    for logger in fresh:
        logger.addHandler(handler)
        logger.propagate = bool(os.environ.get(DEBUG_ENV))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", StatekeeperWarning)  # (deduplicated above)
            warnings.showwarning = show
            yield
    finally:
        for logger, propagate in kept:
            logger.removeHandler(handler)
            logger.propagate = propagate


def print_warning(text: str) -> None:
    """``warning: text`` as one yellow line on stderr."""
    from ._markup import escape

    _stderr().print(f"[yellow]warning:[/] {escape(_one_line(text))}", soft_wrap=True)


def print_warnings(records: list[logging.LogRecord]) -> None:
    """Each held record as one ``warning: …`` line on stderr."""
    if not records:
        return
    for record in records:
        print_warning(record.getMessage())
