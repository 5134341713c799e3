"""An engine closed under a store whose idle settles (``settle_after``) are running —
a backend its owner closes itself, shared by stores it never closes, as ``statekeeper
bench`` does. The settles promise nothing at close, yet each one queued printed
"idle settle of agent ... failed (StoreClosed)", and the one at its write's pass of the
loop when the SQLite engine closed "failed (AssertionError)": the write ran inline on
the writer connection the close had just dropped. Now that write raises StoreClosed,
and a settle meeting a closed engine stops the settles quietly."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.errors import StoreClosed
from statekeeper.records import RawSnapshot

from .test_settle import _doc


async def test_an_engine_closed_under_idle_settles_logs_no_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    store = StateStore(backend, snapshot_every=100, settle_after=0)
    at_write = asyncio.Event()
    replace = backend.replace_snapshot

    async def replacing(*args: Any) -> Any:
        at_write.set()  # (the settle's write starts: its pass of the loop comes next)
        return await replace(*args)

    backend.replace_snapshot = replacing  # type: ignore[method-assign,assignment]
    with caplog.at_level(logging.WARNING, "statekeeper.store.idle_settle"):
        for n in range(1, 3):
            await store.save("a", _doc(n))
            await store.save("b", _doc(n))
        await at_write.wait()
        await backend.close()  # by its owner; the store is never closed
        await store.idle_settled()
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed == []  # (before: 'a' failed (AssertionError), 'b' (StoreClosed))
    stats = store.stats().idle_settles
    assert stats is not None and stats.failed == 0 and stats.pending == 0
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as again:  # nothing lost
        assert (await again.load("a")).data == _doc(2)
        assert (await again.load("b")).data == _doc(2)
        assert (await again.verify()).ok


async def test_a_sqlite_write_at_its_pass_when_the_engine_closes_is_store_closed(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    async with StateStore(backend) as store:
        await store.save("a", _doc(1))
        await store.save("a", _doc(2))
        await store.snapshot("a")
        latest = await backend.latest_snapshot("a", 2)
        assert latest is not None
        write = asyncio.create_task(
            backend.save_snapshot("a", RawSnapshot(2, 1.0, latest.payload, latest.checksum))
        )
        await asyncio.sleep(0)  # (the write at its pass of the loop, the engine open)
        await backend.close()
        with pytest.raises(StoreClosed):  # (before: AssertionError)
            await write
