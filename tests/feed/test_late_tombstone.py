"""A feed tombstone appended after an agent of its id was created again: every read
model drops the live agent, no error.

Two paths append one so (docs/feed.md, "A late tombstone"):

1. a delete through an intent (an engine with no commit of two streams: Redis Cluster,
   tiered, S3; here a tiered store, and SQLite, PostgreSQL and Redis with
   ``appends_together`` off, as such an engine) whose process dies after the delete,
   before the tombstone; the agent is created again before any delete settles the
   intent; the settle then appends the old delete's tombstone after the new agent's
   events;
2. ``statekeeper import`` (a tenant admin's restore likewise: ``record_restored``)
   writes a tombstone of each agent it writes anew, after reading the page's agents
   again; an agent another process creates between that read and the append gets the
   tombstone after its events.

Both are closed: (1) a delete's tombstone is not appended once its agent has events
again, its intent left for ``verify`` to name; (2) where the engine checks absence in
a commit (``checks_absence_together``) the tombstones' commit checks that no agent of
the page has events."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.codec.keys import Keyring
from statekeeper.errors import CapabilityUnsupported, ConflictError
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS
from statekeeper.records import StreamChange
from statekeeper.store import feed_deletes
from statekeeper.store.feed_deletes import is_tombstone_stream

from ..backends._services import POSTGRES_DSN, fresh_url

ENGINES = ["sqlite", "postgresql", "redis"]
KEYRING = Keyring({"k1": bytes(range(32))})
STATES = "SELECT agent_id, seq FROM agent_states ORDER BY agent_id"


class _Died(BaseException):
    """The process dies here (no code catches it)."""


def _split(store: StateStore) -> StateStore:
    store.backend.appends_together = False  # as an engine with no commit of two streams
    return store


@contextlib.contextmanager
def _opener(engine: str, tmp_path: Path) -> Iterator[Callable[[], StateStore]]:
    """Opens the engine's store afresh each call (as a new process would); ``tiered``:
    memory over SQLite, an engine whose deletes go through an intent."""
    if engine == "tiered":
        yield lambda: StateStore(
            TieredBackend(SQLiteBackend(str(tmp_path / "t.db")), hot=MemoryBackend()),
            keyring=KEYRING,
        )
        return
    with fresh_url(engine, tmp_path) as url:
        yield lambda: _split(StateStore(url, keyring=KEYRING))


async def _last_of(store: StateStore, agent_id: str) -> tuple[bool, int]:
    seen = [(c.deleted, c.seq) async for c in store.subscribe(stop_at_head=True)
            if c.agent_id == agent_id]  # fmt: skip
    return seen[-1]


@pytest.mark.parametrize("engine", [*ENGINES, "tiered"])
async def test_a_settled_delete_does_not_drop_the_agent_created_again(
    engine: str, tmp_path: Path
) -> None:
    with _opener(engine, tmp_path) as opened:
        async with opened() as store:
            for n in range(2):
                await store.save("x", {"n": n})
                await store.save("y", {"n": n})
            backend = store.backend
            real = backend.append

            async def append(request: Any) -> Any:
                if is_tombstone_stream(request.agent_id):
                    raise _Died("after the delete, before its tombstone")
                return await real(request)

            backend.append = append  # type: ignore[method-assign]
            with pytest.raises(_Died):
                await store.delete("x")
            backend.append = real  # type: ignore[method-assign]
            assert await store.head("x") == 0  # deleted, its intent left
        async with opened() as store:  # (another process)
            await store.save("x", {"fresh": True})  # created again before any settle
            async with ProjectionRunner(
                store, tmp_path / "models.db", [BUILTINS["agent_states"]()]
            ) as runner:
                await runner.catch_up()
                assert await runner.query(STATES) == [("x", 1), ("y", 2)]
                assert await store.delete("y")  # its first delete settles the intent
                await runner.catch_up()
                assert (await store.load("x")).data == {"fresh": True}
                # the feed's last word on x is its live event (was: the old
                # delete's tombstone, seq 2) and the read model keeps it (was: dropped)
                assert await _last_of(store, "x") == (False, 1)
                assert await runner.query(STATES) == [("x", 1)]


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_import_does_not_drop_an_agent_made_after_its_re_read(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'source.db'}") as source:
        await source.save("x", {"n": 1})
        out = io.BytesIO()
        await export_agents(source, ["x"], out)
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("y", {"n": 0})
            real = feed_deletes._append_retried

            async def append_retried(*args: Any, **kwargs: Any) -> Any:
                # (another process creates x after the page's agents were read again)
                await store.save("x", {"mine": 1})
                await store.save("x", {"mine": 2})
                return await real(*args, **kwargs)

            monkeypatch.setattr(feed_deletes, "_append_retried", append_retried)
            async with ProjectionRunner(
                store, tmp_path / "models.db", [BUILTINS["agent_states"]()]
            ) as runner:
                await runner.catch_up()
                with pytest.raises(ConflictError):  # x exists: the import is refused
                    await import_agents(url, io.BytesIO(out.getvalue()))
                assert (await store.load("x")).data == {"mine": 2}
                await runner.catch_up()
                # x is stored with its two events: the feed's last word on it is its
                # own event (was: a tombstone after them) and the read model has it
                assert await _last_of(store, "x") == (False, 2)
                assert await runner.query(STATES) == [("x", 2), ("y", 1)]


async def test_an_import_waits_for_a_creation_still_to_commit(tmp_path: Path) -> None:
    """PostgreSQL: a creation of the agent still to commit when the tombstones' commit
    checks its absence is waited for, then refuses the tombstones (ConflictError naming
    the agent, none written). A plain read there would not see it, and the tombstone,
    at a feed position after the creation's, would follow its events (was: written)."""
    psycopg = pytest.importorskip("psycopg")
    with fresh_url("postgresql", tmp_path) as url:
        schema = url.rsplit("schema=", 1)[1]
        async with StateStore(url) as store:
            await store.save("y", {"n": 0})
            creator = await psycopg.AsyncConnection.connect(POSTGRES_DSN)
            watcher = await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True)
            async with creator, watcher:
                await creator.execute(  # (another process's creation of x, not committed)
                    f"INSERT INTO {schema}.sk_agents (agent_id, head_seq, created_at,"
                    " updated_at) VALUES ('x', 1, 0, 0)"
                )
                restore = asyncio.create_task(
                    feed_deletes.record_restored(store.backend, store.codec, ["x"])
                )
                waiting = "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
                while not restore.done():  # until it waits for the creation (or ends)
                    if await (
                        await watcher.execute(waiting, (creator.info.backend_pid,))
                    ).fetchone():
                        break
                    await asyncio.sleep(0.01)
                await creator.commit()
                with pytest.raises(ConflictError) as caught:
                    await restore
            assert caught.value.agent_id == "x"
            assert [c async for c in store.subscribe(stop_at_head=True) if c.deleted] == []


async def test_an_engine_without_the_absence_check_gets_the_re_read() -> None:
    """An engine that does not declare ``checks_absence_together`` (an
    ``append_together`` written before the field) refuses an absence check, nothing
    written; ``record_restored`` never sends it one: the page's agents are read again
    before a plain append (an agent stored raises ConflictError naming it)."""
    async with StateStore("memory://") as store:
        backend = store.backend
        backend.checks_absence_together = False  # type: ignore[misc]
        await store.save("y", {"n": 0})
        tombstones = feed_deletes.stream_of(backend, "x")
        with pytest.raises(CapabilityUnsupported):
            await backend.append_together(
                [await feed_deletes._requests(backend, store.codec, tombstones, [("x", 0)], False)],
                [StreamChange("x", absent=True)],
            )
        assert await backend.head(tombstones) == 0
        with pytest.raises(ConflictError) as caught:
            await feed_deletes.record_restored(backend, store.codec, ["x", "y"])
        assert caught.value.agent_id == "y"
        await feed_deletes.record_restored(backend, store.codec, ["x"])
        assert await _last_of(store, "x") == (True, 0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_delete_raced_by_a_creation_appends_no_tombstone(
    engine: str, tmp_path: Path
) -> None:
    """Through an intent, another process creates the agent between the delete and its
    tombstone: the tombstone is not appended (was: after the new agent's events, every
    read model dropped it); the intent is left, ``verify`` names it, and the operator
    drops it with ``force`` (refused without)."""
    with _opener(engine, tmp_path) as opened:
        async with opened() as store, opened() as other:
            for n in range(2):
                await store.save("x", {"n": n})
            await store.save("y", {"n": 0})
            backend = store.backend
            real = backend.delete_agent

            async def delete_agent(agent_id: str) -> bool:
                existed = await real(agent_id)
                if agent_id == "x":  # (another process creates x right after)
                    await other.save("x", {"fresh": True})
                return existed

            async with ProjectionRunner(
                store, tmp_path / "models.db", [BUILTINS["agent_states"]()]
            ) as runner:
                await runner.catch_up()
                backend.delete_agent = delete_agent  # type: ignore[method-assign]
                assert await store.delete("x")
                backend.delete_agent = real  # type: ignore[method-assign]
                await runner.catch_up()
                assert (await store.load("x")).data == {"fresh": True}
                assert await _last_of(store, "x") == (False, 1)
                assert await runner.query(STATES) == [("x", 1), ("y", 1)]
            report = await store.verify()
            (problem,) = [p for p in report.problems if p.kind == "feed"]
            assert problem.agent_id == "x" and "created again" in problem.reason
            (intent,) = await store.feed_intents()
            assert intent.state == "recreated"
            (refused,) = await store.settle_feed_intents(["x"])
            assert refused.outcome == "refused" and "created again" in refused.reason
            (dropped,) = await store.settle_feed_intents(["x"], force=True)
            assert dropped.outcome == "dropped"
            assert await _last_of(store, "x") == (False, 1)  # (no tombstone appended)
            assert await store.feed_intents() == [] and (await store.verify()).ok
