"""What the tests of a tiered rehydration's claim against other processes share: the
"processes" (each a TieredBackend of its own over one durable store — SQLite file,
PostgreSQL schema or Redis prefix — and one cold SQLite file), the demoted agent they
start from, a process held with its first page of "a" in hand, and what "deleted
everywhere" means. Held on hooked calls, no timing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.testing import request

from ._services import require_postgres, require_redis
from .test_tiered_claims import _MAKERS, _redis, _until
from .test_tiered_demote_concurrent import Durable, _drop, _postgres, _process

__all__ = ["MAKERS", "Make", "PageHeld", "deleted_everywhere", "demoted", "held_at", "processes"]

#: how a test opens its durable store
Make = Callable[[Path], Durable]

#: the durable tiers whose claims name an owner: SQLite, PostgreSQL, Redis
MAKERS = _MAKERS


@contextlib.asynccontextmanager
async def processes(
    tmp_path: Path, make: Make, n: int
) -> AsyncIterator[tuple[Durable, list[TieredBackend]]]:
    """``n`` processes over the durable store ``make`` opens (skipped when its server
    is not there), closed at the end and the store dropped."""
    if make is _postgres:
        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    procs = [_process(tmp_path, durable) for _ in range(n)]
    try:
        yield durable, procs
    finally:
        for p in procs:
            await p.close()
    await _drop(tmp_path, durable)


async def demoted(setup: TieredBackend, pages: int = 1) -> None:
    """Agent "a" of 3 events (``pages`` 3: each append keyed, a page of a copy of its
    own), demoted; agent "b" beside it."""
    await setup.durable.initialize()
    for seq in range(3):
        await setup.append(request("a", seq, key=f"k{seq}" if pages > 1 else None))
    await setup.append(request("b", 0))
    assert await setup.demote("a")


class PageHeld:
    """Holds the first (``nth``) page of "a" a backend's durable tier is asked to
    commit — alone (``append``), with other streams (``append_together``) or as a
    compacted stream's base (``append_from_base``) — until :attr:`go`."""

    def __init__(self, backend: TieredBackend, nth: int = 1) -> None:
        self.reached, self.go = asyncio.Event(), asyncio.Event()
        self.nth, self.seen = nth, 0
        durable = backend.durable
        for name in ("append", "append_together", "append_from_base"):
            setattr(durable, name, self._hook(getattr(durable, name)))

    def _hook(self, call: Any) -> Any:
        async def hooked(req: Any, *args: Any, **kwargs: Any) -> Any:
            ids = [r.agent_id for r in req] if isinstance(req, list | tuple) else [req.agent_id]
            if "a" in ids and not self.reached.is_set():
                self.seen += 1
                if self.seen == self.nth:
                    self.reached.set()
                    await self.go.wait()
            return await call(req, *args, **kwargs)

        return hooked


async def held_at(backend: TieredBackend, held: PageHeld) -> asyncio.Future[int]:
    """``backend``'s load of "a" (its head), once it is held by ``held``."""
    task = asyncio.ensure_future(backend.head("a"))
    await _until(held.reached, task)
    return task


async def deleted_everywhere(setup: TieredBackend, fresh: TieredBackend) -> None:
    """ "a" is in no tier (``setup``'s tiers read directly), a fresh process reads it as
    absent and lists "b" alone, and a new agent of that id is written as ever."""
    assert await fresh.head("a") == 0
    assert await fresh.read("a") == []
    assert await setup.durable.head("a") == 0
    assert await setup.durable.head(COLD_MARKER + "a") == 0
    assert setup.cold is not None and await setup.cold.head("a") == 0
    assert [i.agent_id for i in await fresh.list_agents()] == ["b"]
    await fresh.append(request("a", 0))
    assert await fresh.head("a") == 1
