"""A crash between a delete and its feed tombstone, on an engine that cannot commit them
together (Redis Cluster, tiered, S3; a governed store's entry-first delete there),
leaves an intent that the store's next delete finishes with the tombstone.

Before, the tombstone was appended right after the delete: a crash in between left the
delete without it, and every consumer kept the deleted agent for ever. Here the crash
is injected (an exception no code catches, raised instead of the tombstone's append,
or instead of the delete) and the store opened again, as after a restart."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.codec.keys import Keyring
from statekeeper.governance import Audit, parse_policy
from statekeeper.store.feed_intents import PENDING, finish_pending

ENGINES = ["split", "tiered", "governed"]
ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')
KEYRING = Keyring({"k1": bytes(range(32))})


class _Crash(BaseException):
    """The process dies here."""


def _backend(engine: str, tmp_path: Path) -> Backend:
    if engine == "tiered":
        return TieredBackend(SQLiteBackend(str(tmp_path / "t.db")), hot=MemoryBackend())
    backend = SQLiteBackend(str(tmp_path / "s.db"))
    backend.appends_together = False  # as an engine with no commit of two streams
    return backend


@contextlib.asynccontextmanager
async def opened(engine: str, tmp_path: Path, backend: Backend) -> AsyncIterator[StateStore]:
    governed: dict[str, Any] = {}
    if engine == "governed":
        governed = {"principal": "ops", "policy": ADMIN, "audit": Audit()}
    store = StateStore(backend, keyring=KEYRING, **governed)
    try:
        yield store
    finally:
        with contextlib.suppress(Exception):
            await store.close()


def _crashing(backend: Backend, method: str, when: Callable[[Any], bool]) -> None:
    real = getattr(backend, method)

    async def crash(arg: Any, *args: Any, **kwargs: Any) -> Any:
        if when(arg):
            raise _Crash(method)
        return await real(arg, *args, **kwargs)

    setattr(backend, method, crash)


async def _tombstones(store: StateStore) -> list[tuple[str, int]]:
    return [(c.agent_id, c.seq) async for c in store.subscribe(stop_at_head=True) if c.deleted]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_crash_before_the_tombstone_is_finished_by_the_next_delete(
    engine: str, tmp_path: Path
) -> None:
    first = _backend(engine, tmp_path)
    async with opened(engine, tmp_path, first) as store:
        for n in range(3):
            await store.save("gone", {"n": n})
            await store.save("next", {"n": n})
        _crashing(first, "append", lambda r: r.agent_id.startswith("\x01sk-feed/deleted"))
        with pytest.raises(_Crash):
            await store.delete("gone")
        assert await store.head("gone") == 0  # deleted, and no tombstone (the crash)
        assert await _tombstones(store) == []
        assert await store.count_agents() == 1  # (its intent is no agent)
    async with opened(engine, tmp_path, _backend(engine, tmp_path)) as store:
        report = await store.verify()  # names it (writes nothing)
        assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [("gone", 3, "feed")]
        assert await store.delete("next")  # the next delete finishes the first
        assert await _tombstones(store) == [("gone", 3), ("next", 3)]
        assert await store.list_agents() == []
        assert (await store.verify()).ok  # the intent is gone


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_crash_after_the_tombstone_leaves_it_once(engine: str, tmp_path: Path) -> None:
    first = _backend(engine, tmp_path)
    async with opened(engine, tmp_path, first) as store:
        await store.save("gone", {"n": 0})
        # the intent's own delete (its last step) is where it dies
        _crashing(first, "delete_agent", lambda agent_id: agent_id.startswith(PENDING))
        with pytest.raises(_Crash):
            await store.delete("gone")
    backend = _backend(engine, tmp_path)
    async with opened(engine, tmp_path, backend) as store:
        assert await finish_pending(store.backend, store.codec) == ["gone"]
        assert await _tombstones(store) == [("gone", 1)]  # once: the same idempotency key


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_crash_before_the_delete_deletes_nothing(engine: str, tmp_path: Path) -> None:
    first = _backend(engine, tmp_path)
    async with opened(engine, tmp_path, first) as store:
        await store.save("kept", {"n": 0})
        await store.save("other", {"n": 0})
        _crashing(first, "delete_agent", lambda agent_id: agent_id == "kept")
        if engine == "split" or engine == "governed":
            _crashing(first, "delete_agent_at", lambda agent_id: agent_id == "kept")
        with pytest.raises(_Crash):
            await store.delete("kept")
    async with opened(engine, tmp_path, _backend(engine, tmp_path)) as store:
        assert await store.delete("other")
        assert await _tombstones(store) == [("other", 1)]  # the intent of "kept" dropped
        assert (await store.load("kept")).data == {"n": 0}
