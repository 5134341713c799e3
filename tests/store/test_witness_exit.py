"""A store never closed writes its witness's marks when its process ends.

The automatic witness (:mod:`statekeeper.security.highwater`) notes every acknowledged
write in memory and writes the marks to its file a second later, from a timer on the
store's loop. A store with ``durability="sync"`` or ``"group"`` left open when
``asyncio.run`` ended had that timer dropped with the loop: the marks of its last writes
(of all of them, in a short run) never reached the file, so a later rollback of the
database to a copy from before them opened without a word — exactly what the witness is
there to catch. The marks are now written by a task that ``asyncio.run`` cancels at its
end (as the write-behind buffer's appends are); a ``SyncStateStore`` left open writes
them from its interpreter-exit hook. Real subprocess exits, on SQLite (a rollback of the
file found) and PostgreSQL (``witness=PATH``: the marks in the file).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres

SRC = Path(__file__).resolve().parents[2] / "src"

_ASYNC = """
import asyncio, sys
sys.path.insert(0, {src!r})
from statekeeper import StateStore
async def main():
    store = StateStore({url!r}, durability={durability!r}{witness})  # never closed
    for i in range({saves}):
        await store.save("a", {{"n": i}})
    print((await store.load("a")).seq)
asyncio.run(main())
"""

_SYNC = """
import sys
sys.path.insert(0, {src!r})
from statekeeper import SyncStateStore
store = SyncStateStore({url!r}, durability={durability!r}{witness})  # never closed
for i in range({saves}):
    store.save("a", {{"n": i}})
print(store.load("a").seq)
"""

_LOAD = """
import asyncio, sys
sys.path.insert(0, {src!r})
from statekeeper import StateStore
from statekeeper.errors import RollbackDetected
async def main():
    async with StateStore({url!r}) as store:
        try:
            print("seq", (await store.load("a")).seq)
        except RollbackDetected as exc:
            print("rollback", exc.seq)
asyncio.run(main())
"""


def _run(code: str, url: str, **fields: object) -> str:
    fields.setdefault("witness", "")
    done = subprocess.run(
        [sys.executable, "-c", code.format(src=str(SRC), url=url, **fields)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("durability", ["sync", "group"])
def test_a_rollback_after_an_unclosed_store_exited_is_found(
    tmp_path: Path, face: str, durability: str
) -> None:
    """The file is put back to a copy taken after the first write; the witness must
    then know of the five writes after it, made by a process that never closed its
    store (on main: no witness file at all, and the old copy loaded as seq 1)."""
    db = tmp_path / "agents.db"
    url = f"sqlite:///{db}"
    code = _ASYNC if face == "async" else _SYNC
    assert _run(code, url, durability=durability, saves=1) == "1\n"
    shutil.copy(db, tmp_path / "old.db")  # (the run ended: its WAL is checkpointed)
    assert _run(code, url, durability=durability, saves=5) == "6\n"
    for leftover in ("agents.db-wal", "agents.db-shm"):
        (tmp_path / leftover).unlink(missing_ok=True)
    shutil.copy(tmp_path / "old.db", db)
    assert _run(_LOAD, url) == "rollback 6\n"


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    schema = namespace(tmp_path, "sk_wx_")
    try:
        yield f"{POSTGRES_DSN}?schema={schema}"
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("durability", ["sync", "group"])
def test_an_unclosed_postgres_store_writes_its_marks_at_exit(
    postgres_url: str, tmp_path: Path, durability: str
) -> None:
    witness = tmp_path / "pg.sk-witness"
    fields = {"durability": durability, "saves": 3, "witness": f", witness={str(witness)!r}"}
    assert _run(_ASYNC, postgres_url, **fields) == "3\n"
    marks = {m["agent_id"]: m["seq"] for m in json.loads(witness.read_text())["streams"]}
    assert marks == {"a": 3}
