"""Child process of the WAL-growth crash test: one save per word of the parent's.

Usage: python _wal_crash_child.py DB. Saves a chat state of one agent, ``a``, growing
by one ~300-character message a save (its last 20 kept), at ``synchronous=FULL`` with
``durability="sync"``, one save for each line the parent writes on stdin, and never
runs ahead of it (the parent checks the WAL file between two saves):

- ``save``: save, then print ``{"n": n, "seq": seq}`` on stdout, flushed, once the
  store acknowledged the save;
- ``stop`` / ``pass``: save, and as that save's ``COMMIT`` begins (SQLite's trace
  callback, on whichever thread runs it: its rows are written in the open
  transaction, the commit's frames not yet; or, for a lone save made as one
  statement in autocommit, as that statement begins) print ``{"commit": n}``, flushed; then
  ``stop`` blocks there for good (the parent SIGKILLs this process at that exact
  point) and ``pass`` goes on with the commit (the parent kills it wherever that
  save is when it gets there: in the commit's writes, its fsync, or past them).

Exits when stdin closes; else the parent kills it with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
import threading
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import AgentNotFound

#: the lone save's one statement, as the trace shows it (its parameters expanded)
_SAVE_NEXT = "INSERT INTO sk_next_row VALUES"

#: what the next COMMIT does: "" (nothing), "stop" or "pass" (see the docstring)
_doomed = {"mode": "", "n": -1}
_never = threading.Event()


def _tell(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _traced(sql: str) -> None:
    # (a lone save is one statement in autocommit, SQLiteBackend's _SAVE_NEXT: its
    # commit begins with it, before its rows are written)
    if not _doomed["mode"] or (sql != "COMMIT" and not sql.startswith(_SAVE_NEXT)):
        return
    mode, _doomed["mode"] = _doomed["mode"], ""
    _tell({"commit": _doomed["n"]})
    if mode == "stop":
        _never.wait()  # (until the SIGKILL)


def _watch_commits() -> None:
    """Every connection the backend opens reports its statements to :func:`_traced`."""
    connect = SQLiteBackend._connect

    def traced_connect(self: SQLiteBackend) -> sqlite3.Connection:
        conn = connect(self)
        conn.set_trace_callback(_traced)
        return conn

    SQLiteBackend._connect = traced_connect  # type: ignore[method-assign,assignment]


async def main(path: str) -> None:
    _watch_commits()
    store = StateStore(f"sqlite:///{path}?synchronous=FULL", durability="sync")
    start = 0
    with contextlib.suppress(AgentNotFound):  # (a new file: none yet)
        start = (await store.load("a")).data["n"] + 1
    messages: list[str] = []
    for n in range(start, start + 10**9):
        word = sys.stdin.readline().strip()
        if not word:
            break  # (stdin closed: the parent is done)
        if word in ("stop", "pass"):
            _doomed.update(mode=word, n=n)
        messages = [*messages[-19:], f"message {n}: " + "x" * 300]
        result = await store.save("a", {"n": n, "messages": messages})
        _tell({"n": n, "seq": result.last_seq})
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
