"""Part of the backend contract, the change feed (Capability.FEED): the abstract methods
and defaults :class:`~statekeeper.backends.base.Backend` takes from
:class:`FeedContract`."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import CapabilityUnsupported
from ...records import FeedRecord
from .capabilities import Capability

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class FeedContract(ContractPart):
    # The change feed (Capability.FEED). Every event appended gets a *position*: an
    # integer, store-wide, committed atomically with the append, greater than every
    # position committed before it (gaps are allowed: aborted appends, deleted agents,
    # trimmed ranges). ``read_feed`` returns only positions no append still in flight
    # can come before (its *safe frontier*), so a reader that resumes after the last
    # position it saw never skips an event that commits later with a smaller position.

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        """Feed records with ``position > after``, in position order, at most ``limit``,
        none beyond the safe frontier. Records of deleted agents are gone (gaps).
        Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        """:meth:`read_feed`, and the feed's id (:meth:`feed_id`) as it stood when the
        page was read or later: a page holding a position of a renewed feed (a restore
        renews it before its first write) always comes with the new id, so a live
        subscription is told (``FeedChanged``) instead of delivering another numbering.
        The id is None when the page is empty (nothing to check) or the engine keeps
        none. Engines read it with the page (SQLite, PostgreSQL: the same statement;
        Redis: the same pipeline; memory); this default reads it after the page."""
        page = await self.read_feed(after, limit)
        return page, (await self.feed_id() if page else None)

    async def feed_bounds(self) -> tuple[int, int]:
        """``(floor, head)``: positions ``<= floor`` were trimmed away (0 when nothing
        was), ``head`` is the highest position within the safe frontier (0 when
        empty). Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def trim_feed(self, through: int) -> int:
        """Forget feed positions ``<= through`` (the events themselves stay, readable
        per agent); the floor becomes ``through``. Returns how many records were
        dropped. Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def feed_id(self) -> str | None:
        """The id of this store's change feed: 16 hex digits, made (durably) by the
        first call on a store that has none, kept across restarts; None on an engine
        that keeps none (this default: cursors are then not checked). A cursor carries
        it, and a cursor of another feed is refused
        (:class:`~statekeeper.errors.FeedChanged`; :mod:`statekeeper.store.feed_cursor`)."""
        return None

    async def renew_feed_id(self) -> str | None:
        """Give the feed a fresh id (after its events were numbered anew: a restore
        writes them again), durably; returns it. Every cursor taken before is refused
        from then on. None where the engine keeps none (this default)."""
        return None

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        """The feed position of ``agent_id``'s event ``seq`` (in the agent's shard's feed
        on a sharded store), or None when it has none (trimmed away, not stored) or the
        engine cannot say. Retention asks it before removing events, to raise the
        feed's floor over them (:mod:`statekeeper.store.feed_retention`): a subscriber
        behind them is told (``FeedPositionCompacted``) instead of passing over them.
        The default: None (the feed's floor is then left as it is)."""
        return None

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """:meth:`feed_position` of many ``(agent_id, seq)`` events at once: those with a
        position, by pair. Engines whose feed has no index by agent (SQLite, Redis) read
        the feed back from the head ONCE for all of them (retention asks it for a page of
        agents: one scan, not one per old agent). The default asks each in turn."""
        found: dict[tuple[str, int], int] = {}
        for agent_id, seq in wanted:
            position = await self.feed_position(agent_id, seq)
            if position is not None:
                found[(agent_id, seq)] = position
        return found

    async def wait_feed(self, after: int, max_wait: float) -> None:
        """Return when a position ``> after`` may have been committed, or after at
        most ``max_wait`` seconds: a wake-up hint (a reader re-reads ``read_feed``
        either way). The default sleeps ``min(max_wait, feed_poll_interval)``;
        engines with notifications return as soon as one arrives."""
        if Capability.FEED not in self.capabilities:
            raise CapabilityUnsupported(self.name, Capability.FEED.value)
        await asyncio.sleep(min(max_wait, self.feed_poll_interval))

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        """Stored events no head row accounts for — of an agent with no head row, or
        above its head (left by a hand edit or a damaged copy): invisible to every
        read and listing. One ``(agent_id, first_seq, last_seq, count)`` per agent, in
        id order; ``StateStore.verify`` of the whole store names them. None: this engine
        cannot tell (the default; SQLite and PostgreSQL answer with one scan; Redis
        names the agents its index does not list, which no listing sees either)."""
        return None

    async def unlisted_agents(self) -> list[str]:
        """The agents this engine stores (readable by id) that its listings do not
        show, in id order: Redis's taken off its agent index (by hand); a backup and an
        export copy them with the listed ones. Empty where a listing reads the stored
        streams themselves (the default)."""
        return []
