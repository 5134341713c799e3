"""A subscriber reading the target's feed WHILE a restore or an import writes a stream
compacted by retention: the floor over the stream's first event is raised in the same
atomic write as the stream (``append_from_base(raise_floor=True)``, a SQLite image's
copy too), not in a step after all the writes.

Before, ``floor_over_bases`` trimmed after the writes: a projection caught up between
the write and that step folded the compacted agent's kept events onto nothing and its
position moved past the floor, so it never got ``FeedPositionCompacted`` afterwards —
``transitions`` counted 3 of each move where the source's live model had 7, no error.
Each test runs the reader at exactly that point (the floor step hooked), so the
interleaving is deterministic: the reader must now get ``FeedPositionCompacted``."""

from __future__ import annotations

import importlib
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import import_agents
from statekeeper.errors import FeedPositionCompacted
from statekeeper.feed import ProjectionRunner
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.store.feed_cursor import FeedCursor

from ..backends._services import fresh_url
from .test_restored_compacted_feed import _models, _source

restore_module = importlib.import_module("statekeeper.governance.backup.restore")
restoretarget = importlib.import_module("statekeeper.governance.backup.restoretarget")

Reader = Callable[[StateStore], Awaitable[None]]


def _hooked(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, reader: Reader) -> list[str]:
    """Run ``reader`` on the target right before the floor step; what it met."""
    real = getattr(module, name)
    met: list[str] = []

    async def floor_step(store: StateStore, *args: Any) -> None:
        try:
            await reader(store)
            met.append("nothing")
        except FeedPositionCompacted:
            met.append("compacted")
        await real(store, *args)

    monkeypatch.setattr(module, name, floor_step)
    return met


async def _subscriber_from(store: StateStore, position: FeedCursor) -> None:
    """A plain subscriber behind the writes (a cursor without a feed id: nothing to
    refuse with FeedChanged after the restore renewed the id)."""
    async for event in store.subscribe(position, stop_at_head=True):
        # before: keep/x's kept events (seq 22 on) delivered here, onto nothing
        assert event.agent_id != "keep/x" or event.seq == 1, event


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis"])
async def test_a_projection_caught_up_inside_an_import_gets_feed_position_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    _, _, exported = await _source(tmp_path / "src")
    rm = tmp_path / "dst" / "rm.db"
    with fresh_url(target, tmp_path / "dst") as url:
        async with StateStore(url) as store:  # a target with a projection at its head
            await store.save("own/a", {"n": 1}, fsm_state="idle")
            async with ProjectionRunner(store, rm) as runner:
                await runner.catch_up()

        async def projection(store: StateStore) -> None:
            async with ProjectionRunner(store, rm) as runner:  # a live runner's poll
                await runner.catch_up()

        met = _hooked(monkeypatch, restoretarget, "floor_over_bases", projection)
        await import_agents(url, io.BytesIO(exported))
        assert met == ["compacted"]  # was: "nothing", the kept events applied
        async with StateStore(url) as store, ProjectionRunner(store, rm) as runner:
            with pytest.raises(FeedPositionCompacted):  # was: caught up, 3 of 7 moves
                await runner.catch_up()
            assert ("completed", "idle", 3) not in (await _models(runner))["transitions"]


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis", "redis-sharded", "memory"])
async def test_a_subscriber_reading_inside_a_restore_gets_feed_position_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """SQLite takes the image path (one bulk copy), the others the record path; on a
    sharded Redis the floor of the agent's shard."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    _, made, _ = await _source(tmp_path / "src")
    with fresh_url(target.removesuffix("-sharded"), tmp_path / "dst") as url:
        url += "&shards=4" if target.endswith("-sharded") else ""
        async with StateStore(url) as store:
            await store.save("gone/a", {"n": 1})
            await store.delete("gone/a")  # (a restore takes a store without agents)
            before = FeedCursor((await store.feed_cursor_bounds()).head.positions)

            async def subscriber(store: StateStore) -> None:
                await _subscriber_from(store, before)

            met = _hooked(monkeypatch, restore_module, "_floor_over_bases", subscriber)
            await restore(store, [made], BackupKey(b"k" * 32))
            assert met == ["compacted"]  # was: "nothing" (or the assert in the loop)
            with pytest.raises(FeedPositionCompacted):
                await _subscriber_from(store, before)


async def test_a_tenant_import_leaves_the_floor_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``raise_floor`` only for a store admin: the store-wide floor is not a tenant's
    to move (floor_over_bases warns instead, as before): the write alone raises
    nothing for a principal without admin on every namespace."""
    from statekeeper.store.feed_retention import from_base_floored

    calls: list[bool] = []

    async def spy(backend: Any, request: Any, base: Any, kept: Any = (), **kw: Any) -> Any:
        calls.append(kw["raise_floor"])
        return await from_base_floored(backend, request, base, kept, **kw)

    based = importlib.import_module("statekeeper.store.based")
    monkeypatch.setattr(based, "from_base_floored", spy)
    monkeypatch.setattr(
        importlib.import_module("statekeeper.governance.hooks"), "is_store_admin", lambda s: False
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    _, _, exported = await _source(tmp_path / "src")
    with fresh_url("sqlite", tmp_path / "dst") as url:
        async with StateStore(url) as store:
            await store.save("own/a", {"n": 1})
        await import_agents(url, io.BytesIO(exported))
    assert calls == [False]
