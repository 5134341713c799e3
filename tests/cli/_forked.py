"""``statekeeper ARGS`` in a process of its own, forked from an interpreter that has
already imported the CLI (a "zygote"), for a corpus of hundreds of invocations.

A fresh ``python -m statekeeper.cli`` spends most of its CPU time importing (about
0.5 s of 0.7 s per refusal): over the corpus of ``test_cli_bad_arguments`` that was
minutes of a serial run. A forked child is still a process of its own, run to the end
as the console script runs: its own cwd, environment (``TZ`` applied), stdin closed,
stdout and stderr to files, ``sys.exit`` through the interpreter's normal shutdown (so
what a process prints while exiting — an exception ignored in a finalizer, a warning
at shutdown — is on its stderr, and an uncaught exception prints its traceback and
exits 1). Only the imports are shared: start-up itself (what a fresh interpreter
imports, and how fast) is tested in a fresh one (``_proc.imported``,
``test_cli_trust.py``).

The zygote is single-threaded (forking is safe) and serves one invocation at a time:
:class:`Zygotes` keeps a few for invocations run side by side.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

#: the zygote: imports the CLI and the libraries its commands use (not the commands:
#: typer builds every registered command on each run, and a fresh process registers
#: only the one it runs), then for each request line (JSON:
#: args, env, cwd, out, err) forks a child that runs the command; replies the exit code
_ZYGOTE = r"""
import json, os, sys, time
from statekeeper.cli.app import main
import importlib
for name in (  # what the commands import on their way to a refusal (measured)
    "statekeeper.store", "statekeeper.store.opening", "statekeeper.backends.sqlite",
    "statekeeper.security", "statekeeper.cli.progress", "rich.console", "rich.table",
    "rich.progress", "rich.panel", "rich.json", "pydantic", "csv", "pickle", "zipfile",
    "email.utils", "fractions", "tempfile", "statekeeper.backends.postgres",
    "psycopg", "psycopg_pool", "statekeeper.backends.redis", "redis.asyncio",
):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
requests, replies = sys.stdin, sys.stdout
print("ready", file=replies, flush=True)
for line in requests:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        time.tzset()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["out"]), (2, req["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = ["statekeeper", *req["args"]]
        main(req["args"])  # raises SystemExit: this child's interpreter shuts down
        raise SystemExit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), file=replies, flush=True)
"""


class _Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def run(
        self, args: Sequence[str], env: dict[str, str], cwd: Path, scratch: Path
    ) -> tuple[int, str, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out, err = scratch / "stdout", scratch / "stderr"
        request = {"args": list(args), "env": env, "cwd": str(cwd), "out": str(out)}
        self.proc.stdin.write(json.dumps({**request, "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        assert reply, "the zygote died"
        return int(json.loads(reply)), out.read_text(), err.read_text()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Zygotes:
    """``size`` zygotes; :meth:`run` takes a free one (thread-safe)."""

    def __init__(self, size: int, env: dict[str, str], scratch: Path) -> None:
        self._free: queue.Queue[tuple[_Zygote, Path]] = queue.Queue()
        for i in range(size):
            folder = scratch / f"zygote-{i}"
            folder.mkdir()
            self._free.put((_Zygote(env), folder))
        self.size = size

    def run(self, args: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
        zygote, folder = self._free.get()
        try:
            return zygote.run(args, env, cwd, folder)
        finally:
            self._free.put((zygote, folder))

    def close(self) -> None:
        for _ in range(self.size):
            zygote, _ = self._free.get()
            zygote.close()


@contextmanager
def zygotes(size: int, env: dict[str, str]) -> Iterator[Zygotes]:
    with tempfile.TemporaryDirectory(prefix="sk-zygote-") as scratch:
        pool = Zygotes(size, env, Path(scratch))
        try:
            yield pool
        finally:
            pool.close()
