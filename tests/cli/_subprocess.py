"""Running the CLI as a user does (a subprocess), enumerating its commands, and
populated stores on SQLite, PostgreSQL and Redis for the CLI tests."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import typer

from statekeeper.security import Keyring

from ..backends._services import fresh_url
from ._forked import Zygotes, zygotes
from ._proc import populate as _populate
from ._proc import run_in_process


@dataclass
class Run:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"statekeeper {' '.join(self.args)} -> exit {self.code}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "STATEKEEPER_URL",
            "STATEKEEPER_KEY_FILE",
            "STATEKEEPER_KEYS",
            "STATEKEEPER_ACTIVE_KEY",
        )
    }
    env.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
    env.update(extra)
    return env


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> Run:
    """``statekeeper ARGS`` in a fresh interpreter (stdin closed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else cli_env(),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    return Run(tuple(args), proc.returncode, proc.stdout, proc.stderr)


def cli_in_process(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """:func:`cli` run in this process (for refusals: see :func:`._proc.run_in_process`)."""
    code, stdout, stderr = run_in_process(args, env if env is not None else cli_env(), cwd)
    return Run(tuple(args), code, stdout, stderr)


def cli_many(
    invocations: Sequence[Sequence[str]], env: dict[str, str] | None = None, cwd: Path | None = None
) -> list[Run]:
    """Several independent invocations, a few at a time, each its own process: forked
    from an interpreter that imported the CLI already (:mod:`._forked`: a fresh one
    spends most of a refusal's CPU time importing), run to its exit as :func:`cli`."""
    env = env if env is not None else cli_env()
    folder = cwd or Path.cwd()

    def one(pool: Zygotes, args: Sequence[str]) -> Run:
        return Run(tuple(args), *pool.run(args, env, folder))

    with zygotes(4, env) as pool, ThreadPoolExecutor(max_workers=4) as threads:
        return list(threads.map(lambda a: one(pool, a), invocations))


def one_error_line(run: Run) -> str:
    """The single line a failing command printed on stderr (asserting there is one)."""
    assert "Traceback" not in run.stderr + run.stdout, str(run)
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr:\n{run}"
    assert lines[0].startswith("error: "), str(run)
    return lines[0]


@functools.cache
def commands() -> dict[str, typer.models.CommandInfo | None]:
    """Every command path of the app (``"keys status"``…), from the typer app itself.

    Built once per test process: building the click tree of every command costs seconds
    on a loaded machine, and :func:`option_names` asks for it once per command."""
    from statekeeper.cli import app
    from statekeeper.cli._help import load_all

    group = load_all(typer.main.get_command(app))
    found: dict[str, object] = {}

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            if path and getattr(cmd, "invoke_without_command", False):
                found[" ".join(path)] = cmd  # a group that runs on its own (``audit``)
            for name, sub in subs.items():
                if not getattr(sub, "hidden", False):
                    walk(sub, (*path, name))
        else:
            found[" ".join(path)] = cmd

    walk(group, ())
    return found  # type: ignore[return-value]


def option_names(command_path: str) -> set[str]:
    cmd = commands()[command_path]
    names: set[str] = set()
    for param in getattr(cmd, "params", []):
        names.update(getattr(param, "opts", []))
    return names


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def tree(folder: Path) -> dict[str, str | None]:
    """Every file under ``folder`` with its hash (to show nothing was added or changed)."""
    return {
        str(p.relative_to(folder)): (digest(p) if p.is_file() else "dir")
        for p in sorted(folder.rglob("*"))
    }


# -- stores ---------------------------------------------------------------------------

BACKENDS = ("sqlite", "postgresql", "redis")


def populate(url: str, keyring: Keyring | None = None) -> None:
    """alpha (4 events, machine), beta (2 plain saves), gamma (completed)."""
    _populate(url, base=None, keyring=keyring)


@contextmanager
def store_url(backend: str, tmp_path: Path, *, fresh: bool = False) -> Iterator[str]:
    """A URL on ``backend`` unique to the test (nothing there yet); cleaned up after."""
    with fresh_url(backend, tmp_path) as url:
        yield url


# -- the commands that open a store, and what each needs to run -----------------------

#: commands with --db that open a store of their own making instead of the user's
OWN_STORES = {"demo", "bench"}
#: serve listens until stopped: its refusals are tested in tests/inspector/test_cli_serve.py
OWN_STORES |= {"serve"}

#: for each command that opens the user's store: its arguments besides --db/--key-file
#: for a successful run on a store made by :func:`populate` ({out}: a folder for
#: output files, {witness}: a witness file of that store). A new command that opens a
#: store must be added here (test_every_store_command_is_listed enforces it).
STORE_COMMANDS: dict[str, list[str]] = {
    "agents": [],
    "show": ["alpha"],
    "history": ["alpha"],
    "verify": [],
    "feed-intents": [],
    "stats": [],
    "keys status": [],
    "witness export": ["{out}/witness.json"],
    "witness check": ["{witness}"],
    "delete": ["beta", "--yes"],
    "rekey": ["--progress-file", "{out}/rekey.json"],
    "langgraph prune": ["--keep-last", "5"],
    "init": [],
    "repair": [],
    "diff": ["alpha", "--from", "1", "--to", "2"],
    "tail": ["alpha"],
    "export": ["--output", "{out}/export.jsonl"],
    "import": ["{out}/export.jsonl", "--skip-existing"],  # after export, into the same store
    "diagram": [],  # --db: the overlay of observed transitions
    "health": ["--stuck-after", "1000000000", "--stuck-factor", "0"],
    "analyze": [],
    "metrics serve": ["--once"],
    "metrics plot": ["--out", "{out}/activity.svg"],
    "migrate": [
        "--app",
        "statekeeper.schema.structures",
        "--model",
        "statekeeper.Conversation",
        "--dry-run",
    ],
    "schema status": [
        "--app",
        "statekeeper.schema.structures",
        "--model",
        "statekeeper.Conversation",
    ],
    "backup": [
        "--to",
        "{out}/store.skb",
        "--backup-key",
        "{out}/backup.key",
        "--create-backup-key",
        "--overwrite",  # the trust tests run each command twice on one folder
    ],
    # after backup, into the same store: every agent is there already
    "restore": ["{out}/store.skb", "--backup-key", "{out}/backup.key", "--skip-existing"],
    "forget": ["beta", "--yes"],
    "retention apply": ["--rule", "* keep_last=2 snapshot_every=10", "--dry-run"],
    "retention adopt-compactions": ["--dry-run"],
    # the read models go to a file of their own ({out}): the store is only read
    "projections status": ["--read-model", "{out}/read-models.db"],
    "projections run": ["--read-model", "{out}/read-models.db"],
    "projections rebuild": ["transitions", "--read-model", "{out}/read-models.db"],
    "audit": ["--op", "save"],
    "audit verify": [],
    "hold add": ["gamma", "--reason", "a matter"],
    "hold list": [],
    "hold remove": ["gamma", "--reason", "closed"],
}
#: commands that write to the store (all the others only read)
WRITING = {"delete", "rekey", "langgraph prune", "init", "repair", "import", "restore", "forget"}
WRITING |= {"hold add", "hold remove"}
#: commands that refuse to run without a key
NEED_KEY = {"rekey", "forget"}


def store_commands() -> list[str]:
    """Every command that opens the user's store (it has --db), from the app."""
    return sorted(c for c in commands() if "--db" in option_names(c) and c not in OWN_STORES)


def args_for(command: str, **paths: str) -> list[str]:
    return [*command.split(), *(a.format(**paths) for a in STORE_COMMANDS[command])]


def add_langgraph_thread(url: str, keyring: Keyring | None, thread: str = "t1") -> None:
    """A LangGraph thread of three checkpoints, written by the statekeeper saver."""
    from langgraph.checkpoint.base import empty_checkpoint

    from statekeeper.integrations.langgraph import StatekeeperSaver

    with StatekeeperSaver.from_url(url, keyring=keyring) as saver:
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for step in range(3):
            config = saver.put(config, empty_checkpoint(), {"step": step}, {})  # type: ignore[arg-type, assignment]
