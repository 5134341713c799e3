"""The window ``record_unless_created`` leaves: on an engine that commits no two
streams together (Redis Cluster, tiered, S3; here tiered, and SQLite, PostgreSQL and
Redis with ``appends_together`` off, as such an engine) a delete's tombstone follows
it in a write of its own, after a read of the agent's head. An agent another process
creates between that read and the append gets the tombstone after its events
(docs/feed.md, "A late tombstone").

Each test holds the interleaving with a hook (no timing): the other process's
creation runs inside the head read, after it found the agent absent."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS
from statekeeper.store import feed_deletes

from ..backends._services import fresh_url
from .test_late_tombstone import ENGINES, KEYRING, STATES, _last_of, _opener, _split

#: and a sharded Redis store (a feed per shard: what a Redis Cluster uses)
SPLIT = [*ENGINES, "tiered", "redis-sharded"]


@contextlib.contextmanager
def _opened(engine: str, tmp_path: Path) -> Iterator[Callable[[], StateStore]]:
    if engine != "redis-sharded":
        with _opener(engine, tmp_path) as opened:
            yield opened
        return
    with fresh_url("redis", tmp_path) as url:
        yield lambda: _split(StateStore(f"{url}&shards=4", keyring=KEYRING))


def _create_after_the_head_read(
    monkeypatch: pytest.MonkeyPatch, other: StateStore, agent_id: str
) -> list[bool]:
    """The first head read of ``agent_id`` by ``record_unless_created`` that finds it
    absent: ``other`` creates it right after (once). The list gets True then."""
    real = feed_deletes.head_or_lost
    hit: list[bool] = []

    async def head_or_lost(backend: Any, wanted: str) -> int:
        head = await real(backend, wanted)
        if wanted == agent_id and head == 0 and not hit:
            hit.append(True)
            await other.save(agent_id, {"fresh": True})
        return head

    monkeypatch.setattr(feed_deletes, "head_or_lost", head_or_lost)
    return hit


@pytest.mark.parametrize("engine", SPLIT)
async def test_a_creation_between_the_head_read_and_the_tombstone_keeps_the_agent(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tombstone lands after the new agent's event (the window is hit: it is in
    the tombstone stream), yet no subscriber is handed it: the agent's stored stream
    began before it, so it ends no incarnation a consumer holds (was: delivered, and
    every read model dropped the live agent). A delete after it is delivered."""
    with _opened(engine, tmp_path) as opened:
        async with opened() as store, opened() as other:
            for n in range(2):
                await store.save("x", {"n": n})
            await store.save("y", {"n": 0})
            async with ProjectionRunner(
                store, tmp_path / "models.db", [BUILTINS["agent_states"]()]
            ) as runner:
                await runner.catch_up()
                hit = _create_after_the_head_read(monkeypatch, other, "x")
                assert await store.delete("x")
                monkeypatch.undo()
                assert hit == [True]
                tombstones = feed_deletes.stream_of(store.backend, "x")
                assert await store.backend.head(tombstones) == 1  # (late, after x's event)
                await runner.catch_up()
                assert (await store.load("x")).data == {"fresh": True}
                assert await _last_of(store, "x") == (False, 1)
                assert await runner.query(STATES) == [("x", 1), ("y", 1)]
                # a fresh subscriber from the start, and a delete of the live agent
                assert await _last_of(other, "x") == (False, 1)
                assert await store.delete("x")
                await runner.catch_up()
                assert await _last_of(store, "x") == (True, 1)
                assert await runner.query(STATES) == [("y", 1)]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_later_delete_ends_an_intent_left_recreated(engine: str, tmp_path: Path) -> None:
    """docs/feed.md: an intent left ``recreated`` is ended by a later delete of the
    agent, whose tombstone follows. In the process that left it too (its one settle
    per process had run: the intent stayed, ``verify`` failed on it)."""
    with _opener(engine, tmp_path) as opened:
        async with opened() as store, opened() as other:
            for n in range(2):
                await store.save("x", {"n": n})
            backend = store.backend
            real = backend.delete_agent

            async def delete_agent(agent_id: str) -> bool:
                existed = await real(agent_id)
                if agent_id == "x":  # (another process creates x right after)
                    await other.save("x", {"fresh": True})
                return existed

            backend.delete_agent = delete_agent  # type: ignore[method-assign]
            assert await store.delete("x")
            backend.delete_agent = real  # type: ignore[method-assign]
            (intent,) = await store.feed_intents()
            assert intent.state == "recreated"
            assert await store.delete("x")  # the live agent's delete, its tombstone
            assert await _last_of(store, "x") == (True, 1)
            assert await store.feed_intents() == []
            assert (await store.verify()).ok


@pytest.mark.parametrize("engine", SPLIT)
async def test_a_restore_raced_by_a_creation_after_its_re_read_keeps_the_agent(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import`` and a tenant's restore (``record_restored``) where the engine checks
    no absence in a commit: the page's agents are read again, then the tombstones
    appended; an agent created in between got its tombstone after its events, and
    every subscriber dropped it (was: handed out; now passed over)."""
    with _opened(engine, tmp_path) as opened:
        async with opened() as store, opened() as other:
            backend = store.backend
            backend.checks_absence_together = False  # type: ignore[misc]
            await store.save("y", {"n": 0})
            hit = _create_after_the_head_read(monkeypatch, other, "x")
            await feed_deletes.record_restored(backend, store.codec, ["x"])
            monkeypatch.undo()
            assert hit == [True]
            assert await backend.head(feed_deletes.stream_of(backend, "x")) == 1
            assert await _last_of(store, "x") == (False, 1)
            assert await _last_of(other, "x") == (False, 1)
