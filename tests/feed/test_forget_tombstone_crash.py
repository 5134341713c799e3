"""A crash between ``forget``'s destruction of the data key and its feed tombstone
(the key lives outside the engine: no engine commits the two together) left read
models holding the forgotten agent's derived plaintext for ever. The tombstone now
goes through an intent written before the key is destroyed: the next forget or delete
finishes it (once), ``verify`` names it meanwhile, and an intent whose key is intact
(the crash came before the destruction) is dropped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.governance.shredding import forget
from statekeeper.store.feed_intents import PENDING, finish_pending

ENGINES = ["sqlite", "tiered"]


class _Crash(BaseException):
    """The process dies here."""


def _backend(engine: str, tmp_path: Path) -> Backend:
    if engine == "tiered":
        return TieredBackend(SQLiteBackend(str(tmp_path / "t.db")), hot=MemoryBackend())
    return SQLiteBackend(str(tmp_path / "s.db"))


@contextlib.asynccontextmanager
async def opened(engine: str, tmp_path: Path) -> AsyncIterator[StateStore]:
    keyring = Keyring(
        {"k1": bytes(range(32))}, data_keys=SqliteKeyVault(str(tmp_path / "vault.db"))
    )
    store = StateStore(_backend(engine, tmp_path), keyring=keyring)
    try:
        yield store
    finally:
        with contextlib.suppress(Exception):
            await store.close()


def _crash_on_tombstone(backend: Backend) -> None:
    real = backend.append

    async def crash(request: Any) -> Any:
        if request.agent_id.startswith("\x01sk-feed/deleted"):
            raise _Crash("append")
        return await real(request)

    backend.append = crash  # type: ignore[method-assign]


async def _tombstones(store: StateStore) -> list[tuple[str, int, bool]]:
    return [
        (c.agent_id, c.seq, bool(c.event.info.get("forgotten")))
        async for c in store.subscribe(stop_at_head=True)
        if c.deleted
    ]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_crash_after_the_key_is_destroyed_is_finished_by_the_next_delete(
    engine: str, tmp_path: Path
) -> None:
    async with opened(engine, tmp_path) as store:
        for n in range(2):
            await store.save("acme/alice", {"secret": f"s{n}"})
            await store.save("keep", {"n": n})
        _crash_on_tombstone(store.backend)
        with pytest.raises(_Crash):
            await forget(store, "acme/alice")
        assert await _tombstones(store) == []  # the key is gone, the feed never told
    async with opened(engine, tmp_path) as store:
        report = await store.verify()  # names it (writes nothing)
        assert ("acme/alice", 2, "feed") in [(p.agent_id, p.seq, p.kind) for p in report.problems]
        assert await store.count_agents() == 2  # (its intent is no agent)
        assert await store.delete("keep")  # the next delete finishes it
        assert await _tombstones(store) == [("acme/alice", 2, True), ("keep", 2, False)]
        assert await finish_pending(store.backend, store.codec) == []  # once
        assert await _tombstones(store) == [("acme/alice", 2, True), ("keep", 2, False)]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_crash_before_the_key_is_destroyed_forgets_nothing(
    engine: str, tmp_path: Path
) -> None:
    async with opened(engine, tmp_path) as store:
        await store.save("acme/alice", {"secret": "s"})
        keyring = store.codec.keyring
        assert keyring is not None

        def crash(*args: Any, **kwargs: Any) -> Any:
            raise _Crash("forget")

        keyring.forget_in = crash  # type: ignore[method-assign]
        with pytest.raises(_Crash):
            await forget(store, "acme/alice")
    async with opened(engine, tmp_path) as store:
        assert [a.agent_id async for a in _intents(store)] != []  # the crash left one
        assert await finish_pending(store.backend, store.codec) == []  # dropped
        assert [a.agent_id async for a in _intents(store)] == []
        assert await _tombstones(store) == []
        assert (await store.load("acme/alice")).data == {"secret": "s"}


async def _intents(store: StateStore) -> AsyncIterator[Any]:
    for info in await store.backend.list_agents(after=PENDING, limit=100):
        if info.agent_id.startswith(PENDING):
            yield info


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_process_without_the_key_vault_leaves_a_forgets_intent(
    engine: str, tmp_path: Path
) -> None:
    """A process whose keyring has no key vault (a delete or retention job opened with
    the master key alone) cannot tell whether a forget's key was destroyed: it used to
    take it for intact and drop the intent, and the forgotten agent never got its
    tombstone (``verify`` found nothing either). It leaves it to one that can tell."""
    async with opened(engine, tmp_path) as store:
        for n in range(2):
            await store.save("acme/alice", {"secret": f"s{n}"})
            await store.save("keep", {"n": n})
            await store.save("other", {"n": n})
        _crash_on_tombstone(store.backend)
        with pytest.raises(_Crash):
            await forget(store, "acme/alice")
    keyring = Keyring({"k1": bytes(range(32))})  # no key vault
    async with StateStore(_backend(engine, tmp_path), keyring=keyring) as store:
        assert await store.delete("keep")
        assert [a.agent_id async for a in _intents(store)] != []  # (dropped, before)
    async with opened(engine, tmp_path) as store:
        report = await store.verify()
        assert ("acme/alice", 2, "feed") in [(p.agent_id, p.seq, p.kind) for p in report.problems]
        assert await store.delete("other")  # one with the vault finishes it
        assert await _tombstones(store) == [
            ("keep", 2, False),
            ("acme/alice", 2, True),
            ("other", 2, False),
        ]
