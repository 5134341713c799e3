"""The rest of the engine contract for :class:`~.observed.ObservedBackend`: every
member off the hot path (rewrites, pruning, keys, markers, listings, the change feed,
backups and restores, deletes, health, the engine's own declarations), each timed and
counted like every engine call or, where noted, handed to the engine untimed. A part of
the wrapper kept in its own module so that each stays small."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, Capability, Health, KeptKeys, LatestRead
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    FeedRecord,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
    StreamExport,
    StreamRows,
)

if TYPE_CHECKING:
    from ..backends.sqlite.pages import PageSnapshot
    from .instrumentation import Instrumentation

__all__ = ["RestCalls"]


class RestCalls(Backend):
    """The wrapper's members off the hot path: ``inner`` is the wrapped engine, ``_obs``
    the instrumentation the calls report to (both set by the wrapper). A
    :class:`Backend` subclass, as the wrapper is, so that the contract wraps the ones
    that take an agent id first with its id check (``Backend.__init_subclass__``)
    exactly as it wrapped them when they were the wrapper's own."""

    inner: Backend
    _obs: Instrumentation

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        done: list[bool] = await self._obs.call(
            "rewrite_many", None, self.inner.rewrite_many, requests
        )
        return done

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        at = () if head is None and checksum is None else (head, checksum)  # (an old override)
        await self._obs.call(
            "prune", agent_id, self.inner.prune, agent_id, base_seq, drop_snapshots, *at
        )

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        done: bool = await self._obs.call(
            "replace_snapshot",
            agent_id,
            self.inner.replace_snapshot,
            agent_id,
            snapshot,
            drop_seq,
            head,
            checksum,
        )
        return done

    async def export_streams(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamExport]:
        # a backup's page (one call per page): the engine's own, untimed
        return await self.inner.export_streams(ranges)

    async def export_rows(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamRows]:
        # a backup's page (one call per page): the engine's own, untimed
        return await self.inner.export_rows(ranges)

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        found: list[LatestRead | None] = await self._obs.call(
            "read_latest_many", None, self.inner.read_latest_many, agent_ids
        )
        return found

    async def read_marker(self, name: str) -> bool | None:
        return await self.inner.read_marker(name)

    async def set_marker(self, name: str) -> None:
        await self.inner.set_marker(name)

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        found: list[RawEvent | None] = await self._obs.call(
            "read_heads", None, self.inner.read_heads, agent_ids
        )
        return found

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents", None, self.inner.list_agents_before, before, limit
        )
        return page

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents",
            None,
            functools.partial(self.inner.list_agents_by_write, newest_first=newest_first),
            cursor,
            limit,
        )
        return page

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        found: AppendResult | None = await self._obs.call(
            "lookup_key", agent_id, self.inner.lookup_key, agent_id, key
        )
        return found

    async def head(self, agent_id: str) -> int:
        seq: int = await self._obs.call("head", agent_id, self.inner.head, agent_id)
        return seq

    async def rewrite(self, request: RewriteRequest) -> None:
        await self._obs.call("rewrite", request.agent_id, self.inner.rewrite, request)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        keys: list[tuple[str, int, int]] = await self._obs.call(
            "idempotency_keys", agent_id, self.inner.idempotency_keys, agent_id
        )
        return keys

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        renamed: int = await self._obs.call(
            "rename_keys", agent_id, self._rename_keys, agent_id, renames, guard
        )
        return renamed

    async def _rename_keys(
        self, agent_id: str, renames: Sequence[tuple[str, str]], guard: StreamChange | None
    ) -> int:
        if guard is None:  # (an engine written before it takes no guard)
            return await self.inner.rename_keys(agent_id, renames)
        return await self.inner.rename_keys(agent_id, renames, guard=guard)

    async def set_ttl(self, agent_id: str, ttl: float | None) -> bool:
        done: bool = await self._obs.call("set_ttl", agent_id, self.inner.set_ttl, agent_id, ttl)
        return done

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        forgotten: int = await self._obs.call(
            "expire_keys", agent_id, self._expire_keys, agent_id, before, count_only
        )
        return forgotten

    async def _expire_keys(self, agent_id: str | None, before: float, count_only: bool) -> int:
        return await self.inner.expire_keys(agent_id, before, count_only=count_only)

    async def hold_keys(self, pattern: str, held: bool) -> int:
        covered: int = await self._obs.call("hold_keys", None, self.inner.hold_keys, pattern, held)
        return covered

    async def drop_all(self) -> int | None:
        dropped: int | None = await self._obs.call("drop_all", None, self.inner.drop_all)
        return dropped

    async def schema_version(self) -> int:
        version: int = await self._obs.call("schema_version", None, self.inner.schema_version)
        return version

    # the change feed: reads timed like any call; a live wait is not an operation
    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        records: list[FeedRecord] = await self._obs.call(
            "read_feed", None, self.inner.read_feed, after, limit
        )
        return records

    async def feed_bounds(self) -> tuple[int, int]:
        bounds: tuple[int, int] = await self._obs.call("feed_bounds", None, self.inner.feed_bounds)
        return bounds

    async def trim_feed(self, through: int) -> int:
        dropped: int = await self._obs.call("trim_feed", None, self.inner.trim_feed, through)
        return dropped

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        found: int | None = await self._obs.call(
            "feed_position", agent_id, self.inner.feed_position, agent_id, seq
        )
        return found

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = await self._obs.call(
            "feed_positions", None, self.inner.feed_positions, wanted
        )
        return found

    async def wait_feed(self, after: int, max_wait: float) -> None:
        await self.inner.wait_feed(after, max_wait)

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        seq: int = await self._obs.call("seq_at", agent_id, self.inner.seq_at, agent_id, timestamp)
        return seq

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await self._obs.call(
            "save_snapshot", agent_id, self.inner.save_snapshot, agent_id, snapshot
        )
        self._obs.snapshot_size.observe(len(snapshot.payload))

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents", None, self.inner.list_agents, after, limit
        )
        return page

    async def stream_bases(self, agent_ids: Sequence[str]) -> list[int]:
        return await self.inner.stream_bases(agent_ids)  # a backup's first seqs: untimed

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        return await self.inner.orphaned_events()  # verify's one scan: untimed

    async def unlisted_agents(self) -> list[str]:
        return await self.inner.unlisted_agents()  # a backup's one scan: untimed

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        # a restore of a compacted stream (one call per such stream): the engine's own
        more: dict[str, Any] = {"raise_floor": True} if raise_floor else {}
        if guard is not None:  # (an engine written before it takes no guard)
            more["guard"] = guard
        return await self.inner.append_from_base(request, base, kept_keys, **more)

    async def copy_to_file(self, dest: str, prefix: str = "") -> bool:
        # a backup's file copy (one call per backup): the engine's own, untimed
        return await self.inner.copy_to_file(dest, prefix)

    def in_place(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.in_place()  # (no engine call: untimed)

    async def page_snapshot(self, prefix: str = "") -> PageSnapshot | None:
        # a backup's page image (one call per backup): the engine's own, untimed
        return await self.inner.page_snapshot(prefix)

    async def import_image(
        self, image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
    ) -> bool:
        # a restore's bulk copy of a checked image (one call per restore): untimed
        floor = {"raise_floor": True} if raise_floor else {}
        return await self.inner.import_image(image, expected, **floor)

    async def copy_out(self, prefix: str, write: Callable[[bytes], None]) -> dict[str, Any] | None:
        # a backup's bulk export (one call per backup): the engine's own, untimed
        return await self.inner.copy_out(prefix, write)

    async def count_agents(self) -> int:
        return int(await self._obs.call("count_agents", None, self.inner.count_agents))

    async def count_prefix(self, prefix: str) -> int:
        return int(await self._obs.call("count_agents", None, self.inner.count_prefix, prefix))

    async def delete_agent(self, agent_id: str) -> bool:
        return bool(
            await self._obs.call("delete_agent", agent_id, self.inner.delete_agent, agent_id)
        )

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        # the engine's own atomic step (the default would compare and delete in two calls)
        existed: bool = await self._obs.call(
            "delete_agent", agent_id, self.inner.delete_agent_at, agent_id, head, checksum
        )
        return existed

    async def health(self) -> Health:
        report: Health = await self._obs.call("health", None, self.inner.health)
        return report

    async def close(self) -> None:
        await self.inner.close()

    def refuse_fence(self, request: AppendRequest) -> None:
        self.inner.refuse_fence(request)

    def supports(self, capability: Capability) -> bool:
        return self.inner.supports(capability)

    def require(self, capability: Capability, why: str = "") -> None:
        self.inner.require(capability, why)

    async def ensure_store(self) -> None:
        await self.inner.ensure_store()

    async def initialize(self) -> None:
        await self.inner.initialize()
