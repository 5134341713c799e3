"""Ctrl-C while the ``statekeeper`` command starts: one line and exit code 130.

Until the CLI's ``main`` runs, a Ctrl-C lands in some module being imported (this
package's, typer's, the command table's): Python's default would print a traceback
ending in ``KeyboardInterrupt`` and end the process by the signal. So when the process
is the ``statekeeper`` command (the console script, or ``python -m statekeeper.cli``),
the first import of this package puts in a handler that says ``error: interrupted``
and exits 130 at once (nothing is open yet: nothing to clean up);
:func:`statekeeper.cli.app.main` puts Python's own handler back when it takes over.
Any other process that imports statekeeper keeps its handlers untouched.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["guard", "release"]

#: what the console script may be called (``pip``'s launchers on Windows too)
_SCRIPTS = {"statekeeper", "statekeeper.exe", "statekeeper-script.py"}


def _is_the_command() -> bool:
    if sys.argv and os.path.basename(sys.argv[0]) in _SCRIPTS:
        return True
    argv: list[str] = list(getattr(sys, "orig_argv", ()))[1:]  # python's options, then -m or a file
    value = False  # the next word is an option's value (-X dev, -W error)
    for i, arg in enumerate(argv):
        if value:
            value = False
        elif arg.startswith("-m"):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            return module == "statekeeper.cli"
        elif arg in ("-X", "-W", "--check-hash-based-pycs"):
            value = True
        elif not arg.startswith("-") or arg.startswith("-c") or arg == "-":
            return False  # a script, a command, stdin: not the statekeeper command
    return False


def _interrupted(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"error: interrupted\n")
    os._exit(130)


def guard() -> None:
    """In the ``statekeeper`` command's process, Ctrl-C from now on ends it with one line
    and 130 (unless Ctrl-C was ignored or handled already)."""
    if _is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def release() -> None:
    """Python's own Ctrl-C (``KeyboardInterrupt``) back, where :func:`guard` replaced it."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
