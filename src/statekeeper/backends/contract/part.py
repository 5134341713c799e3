"""What each part of the contract may use of the others, for the type checker only:
the parts are mixed into :class:`~statekeeper.backends.base.Backend`, which declares
these attributes and gets these methods from its other parts. At run time a part's
base is :class:`abc.ABC`, not this protocol (see the parts' modules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...records import AgentInfo, AppendRequest, AppendResult, RawEvent, RawSnapshot, StreamChange
from .capabilities import Capability


class ContractPart(Protocol):
    name: str
    compares_head_tag: bool
    capabilities: frozenset[Capability]
    appends_together: bool
    feed_poll_interval: float
    changes_alone_together: bool
    supports_leases: bool

    def supports(self, capability: Capability) -> bool: ...

    async def head(self, agent_id: str) -> int: ...

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]: ...

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]: ...

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]: ...

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None: ...

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]: ...

    async def head_checksum(self, agent_id: str, head: int) -> bytes | None: ...

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]: ...
