"""One of each kind of write a store makes (a save of an existing agent, a first save,
a keyed save, a lease), for the tests that check every write path refuses the same
way (``tests/backends/test_sqlite_file_moved.py``, ``test_sqlite_wal_deleted.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from statekeeper import StateStore

__all__ = ["WRITES"]


async def _save(store: StateStore) -> object:
    return await store.save("a", {"n": 2})


async def _create(store: StateStore) -> object:
    return await store.save("new", {"n": 1})


async def _keyed(store: StateStore) -> object:
    return await store.save("a", {"n": 3}, idempotency_key="k-1")


async def _lease(store: StateStore) -> object:
    return await store.backend.acquire_lease("a", "me", 30.0)


WRITES: list[Callable[[StateStore], Awaitable[object]]] = [_save, _create, _keyed, _lease]
