"""What every part of :class:`~statekeeper.backends.tiered.TieredBackend` shares: its
tiers, settings and per-process state (declared here for the type checker; the backend's
``__init__`` sets them), and the checks each call starts with (open, writable)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ReadOnlyStore, StoreClosed
from .base import Backend
from .keyed_locks import KeyedLock

__all__ = ["PAGE", "TieredPart"]

#: the page size of listings and copies between tiers
PAGE = 1000


class TieredPart(Backend):
    """The base of each part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    durable: Backend
    hot: Backend | None
    cold: Backend | None
    idle_after: float | None
    demote_interval: float | None
    hot_timeout: float
    hot_retry_after: float
    fill_limit: int
    clock: Callable[[], float]
    readonly: bool
    _hot_down_until: float
    #: the hot tier answered once (its configuration accepted: ``_check_hot``)
    _hot_ready: bool
    _dirty: set[str]
    #: one per agent: its durable write and hot copy together
    _locks: KeyedLock
    _last_used: dict[str, float]
    #: agents this process found without a cold marker (or brought back whole), each
    #: with the highest durable head it saw of it (see ``TieredBackend.__init__``)
    _settled: dict[str, int]
    _maintenance: asyncio.Task[None] | None
    _closed: bool
    stats: dict[str, int]

    if TYPE_CHECKING:

        async def _maintain(self) -> None:
            """The background demotion loop (:mod:`.tiered_demote`)."""

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("tiered backend is closed")
        if (
            self.demote_interval is not None
            and self._maintenance is None
            and self.cold is not None
            and not self.readonly
        ):
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())

    def _touch(self, agent_id: str) -> None:
        if self.idle_after is not None:
            self._last_used[agent_id] = self.clock()

    def hot_available(self) -> bool:
        """True when a hot tier is configured and not marked down (never when
        read-only)."""
        # Read-only, the hot tier is simply not used (rather than used under the
        # durable-head check): a miss or a stale copy would have to be refilled or
        # dropped, which are writes, and the process-local hot tier of a fresh
        # read-only process is empty anyway. The durable tier answers everything, as
        # it does whenever the hot tier is down.
        if self.readonly:
            return False
        return self.hot is not None and time.monotonic() >= self._hot_down_until

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore("the tiered store is open read-only")
