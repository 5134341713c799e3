"""A governed store's reads (:class:`GovernedReads`): each checks ``read`` on the agent
it names (and records it when the audit log records reads); a listing or a
store-wide check shows only the agents the principal may read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from ..backends.base import Health
from ..records import AgentInfo, AppendResult, Event, Snapshot
from .governed_base import GovernedBase

if TYPE_CHECKING:
    from .digests import StreamDigest
    from .heads import AgentHead, StoredSize
    from .verification import Problem, VerifyReport

__all__ = ["GovernedReads"]


class GovernedReads(GovernedBase):
    """The read calls of :class:`~.governed.GovernedStateStore`."""

    async def get(self, agent_id: str) -> Snapshot | None:
        await self._check_read(agent_id, "get")
        return await super().get(agent_id)

    async def get_many(self, agent_ids: Sequence[str]) -> list[Snapshot | None]:
        # all or nothing: one unreadable id refuses the whole call before any read
        ids = list(agent_ids)
        for agent_id in ids:
            await self._check_read(agent_id, "get")
        return await super().get_many(ids)

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        await self._check_read(agent_id, "load")
        return await super().load(agent_id, at_seq=at_seq, at_time=at_time)

    async def head(self, agent_id: str) -> int:
        await self._check_read(agent_id, "head")
        return await super().head(agent_id)

    async def _head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        await self._check_read(agent_id, "head")
        return await super()._head_tag(agent_id)

    async def head_state(self, agent_id: str) -> AgentHead | None:
        await self._check_read(agent_id, "head")
        return await super().head_state(agent_id)

    async def head_states(self, agent_ids: Sequence[str]) -> list[AgentHead | None]:
        ids = list(agent_ids)  # once: an iterator is checked AND read
        for agent_id in ids:
            await self._check_read(agent_id, "head")
        return await super().head_states(ids)

    async def stored_size(self, agent_id: str) -> StoredSize:
        await self._check_read(agent_id, "size")
        return await super().stored_size(agent_id)

    async def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        await self._check_read(agent_id, "history")
        async for event in super().history(agent_id, after_seq=after_seq, to_seq=to_seq):
            yield event

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of the agents this principal may read (the others are never seen)."""
        gov = self._governance
        if gov.policy is not None and not gov.policy.knows(gov.principal or ""):
            await gov.require(None, "read", "list")  # refused (and audited)
        out: list[AgentInfo] = []
        cursor = after
        while len(out) < limit:
            page = await super().list_agents(after=cursor, limit=limit)
            out.extend(info for info in page if gov.can_read(info.agent_id))
            if len(page) < limit:
                break
            cursor = page[-1].agent_id
        return out[:limit]

    async def unlisted_agents(self) -> list[str]:
        """Those this principal may read (as listed: the others are never seen)."""
        gov = self._governance
        return [a for a in await super().unlisted_agents() if gov.can_read(a)]

    async def health(self) -> Health:
        """The backend's health: ``ok`` and the engine's name for every principal; its
        ``detail`` (the file's size, the engine's agent count, paths, pools: figures
        over every namespace) for an admin on ``**`` only; the others get its
        ``error``, if any, alone."""
        health = await super().health()
        if self._governance.store_admin():
            return health
        kept = {k: v for k, v in health.detail.items() if k == "error"}
        return Health(ok=health.ok, backend=health.backend, detail=kept)

    async def count_agents(self) -> int:
        """How many agents this principal may read."""
        if self._governance.policy is None:
            return await super().count_agents()
        return len([info async for info in self.iter_agents()])

    async def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        await self._check_read(agent_id, "find_key")
        return await super().find_key(agent_id, key)

    async def digest(self, agent_id: str, at_seq: int | None = None) -> StreamDigest:
        await self._check_read(agent_id, "digest")
        return await super().digest(agent_id, at_seq)

    async def check_digest(self, expected: StreamDigest) -> str | None:
        agent_id = getattr(expected, "agent_id", None)
        if isinstance(agent_id, str):
            await self._check_read(agent_id, "digest")
        return await super().check_digest(expected)

    async def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """:meth:`StateStore.verify` of the agents this principal may read."""
        if agent_ids is None and not self._governance.store_admin():
            agent_ids = [info.agent_id async for info in self.iter_agents()]
        elif isinstance(agent_ids, Iterable) and not isinstance(agent_ids, str):
            agent_ids = list(agent_ids)  # once: an iterator is checked AND verified
            for agent_id in agent_ids:
                await self._check_read(agent_id, "verify")
        return await super().verify(agent_ids)

    async def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        if agent_ids is None:
            if not self._governance.store_admin():
                agent_ids = [info.agent_id async for info in self.iter_agents()]
        elif isinstance(agent_ids, Iterable) and not isinstance(agent_ids, str):
            agent_ids = list(agent_ids)  # once: an iterator is checked AND checked again
            for agent_id in agent_ids:
                await self._check_read(agent_id, "verify")
        return await super().witness_problems(agent_ids)

    async def orphan_problems(self, verified: Collection[str] = ()) -> list[Problem]:
        """:meth:`StateStore.orphan_problems` of the agents this principal may read."""
        found = await super().orphan_problems(verified)
        return [p for p in found if self._governance.can_read(p.agent_id)]
