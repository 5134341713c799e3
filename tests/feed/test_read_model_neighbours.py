"""Two SQLite stores beside each other (``x.db`` and ``x.db2``, ``x.sqlite``) share the
default read-model file of ``statekeeper projections``, ``x.projections.db`` (the
store's name without its suffix). Before: ``projections status --db x.db2`` showed
``x.db``'s projections as its own (positions, "behind" counted against ``x.db2``'s
feed, exit 0), ``run`` refused with FeedChanged and advised a rebuild, and ``rebuild``
emptied ``x.db``'s read model and filled it with ``x.db2``'s. Now the default file is
refused (``ReadModelOfAnotherStore``, exit 2, nothing changed) when a projection there
follows another store *and* another feed; a store restored in place (its path) or
moved (its feed) is still its own."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path

from statekeeper import StateStore
from statekeeper.feed.feedcheck import store_mark
from statekeeper.feed.stored import projection_cursors
from statekeeper.governance.backup import BackupKey, backup, restore

from ..cli._proc import sk


async def _fill(path: Path, agents: int) -> None:
    async with StateStore(f"sqlite:///{path}") as store:
        for i in range(agents):
            await store.save(f"{path.name}-{i}", {"i": i})


def _states(models: Path) -> list[str]:
    with sqlite3.connect(models) as db:
        rows = [str(r[0]) for r in db.execute("SELECT agent_id FROM agent_states ORDER BY 1")]
    db.close()
    return rows


def test_a_neighbours_default_read_models_are_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "x.db", tmp_path / "x.db2"
    asyncio.run(_fill(first, 3))
    asyncio.run(_fill(second, 5))
    ran = sk("projections", "run", "--db", str(first))
    assert ran.returncode == 0, ran.stderr
    models = tmp_path / "x.projections.db"
    assert _states(models) == ["x.db-0", "x.db-1", "x.db-2"]
    for command in (("status",), ("run",), ("rebuild", "agent_states")):
        out = sk("projections", *command, "--db", str(second))
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert "holds the read models of another store" in out.stderr
        assert "--read-model" in out.stderr
    assert _states(models) == ["x.db-0", "x.db-1", "x.db-2"]  # (before: x.db2's five)
    status = sk("projections", "status", "--db", str(first), "--json")
    assert status.returncode == 0, status.stderr
    # its own file given: x.db2's projections, x.db's untouched
    own = tmp_path / "x2.projections.db"
    ran = sk("projections", "run", "--db", str(second), "--read-model", str(own))
    assert ran.returncode == 0, ran.stderr
    assert len(_states(own)) == 5
    assert _states(models) == ["x.db-0", "x.db-1", "x.db-2"]


def test_a_store_restored_in_place_is_still_its_own(tmp_path: Path) -> None:
    """Same path, new feed: the restore case, where a rebuild is what is needed."""
    store = tmp_path / "x.db"
    asyncio.run(_fill(store, 3))
    assert sk("projections", "run", "--db", str(store)).returncode == 0
    key = BackupKey(os.urandom(32))

    async def backed_up() -> None:
        async with StateStore(f"sqlite:///{store}") as source:
            await backup(source, tmp_path / "full.skb", key)

    async def restored() -> None:
        async with StateStore(f"sqlite:///{store}") as target:
            await restore(target, [tmp_path / "full.skb"], key)
            await target.save("x.db-3", {"i": 3})

    asyncio.run(backed_up())
    for leftover in tmp_path.glob("x.db*"):
        leftover.unlink()
    asyncio.run(restored())
    ran = sk("projections", "run", "--db", str(store))
    assert ran.returncode == 2 and "rebuild" in ran.stderr, ran.stderr  # FeedChanged
    rebuilt = sk("projections", "rebuild", "agent_states", "--db", str(store))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _states(tmp_path / "x.projections.db") == [f"x.db-{i}" for i in range(4)]


def test_a_moved_store_is_still_its_own(tmp_path: Path) -> None:
    """Another path, the same feed: a store moved (with its read models)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    store = tmp_path / "a" / "x.db"
    asyncio.run(_fill(store, 3))
    assert sk("projections", "run", "--db", str(store)).returncode == 0
    for name in ("x.db", "x.projections.db"):
        shutil.move(tmp_path / "a" / name, tmp_path / "b" / name)
    moved = tmp_path / "b" / "x.db"
    asyncio.run(_fill(moved, 4))  # (saves x.db-0..3 again: 4 new events)
    ran = sk("projections", "run", "agent_states", "--db", str(moved))
    assert ran.returncode == 0, ran.stderr
    assert "agent_states: 4 events applied" in ran.stdout


def test_retention_leaves_a_neighbours_projections_out(tmp_path: Path) -> None:
    """The projections a retention run names as behind the feed it trimmed: of the
    default file, not another store's."""
    first, second = tmp_path / "x.db", tmp_path / "x.db2"
    asyncio.run(_fill(first, 3))
    asyncio.run(_fill(second, 5))
    assert sk("projections", "run", "--db", str(first)).returncode == 0
    models = tmp_path / "x.projections.db"

    async def marks(path: Path) -> tuple[str | None, str | None]:
        async with StateStore(f"sqlite:///{path}") as store:
            return await store.backend.feed_id(), store_mark(store.backend)

    feed, mark = asyncio.run(marks(second))
    assert projection_cursors(models, 1, feed=feed, store=mark) == {}
    assert len(projection_cursors(models, 1)) == 4  # (without them: every row)
    feed, mark = asyncio.run(marks(first))
    assert len(projection_cursors(models, 1, feed=feed, store=mark)) == 4
