"""The backend contract: the small set of operations every storage engine provides.

A backend stores two things per agent — an append-only stream of encoded events with
gap-free sequence numbers, and snapshots at some of those sequence numbers — and knows
nothing else. Encoding, checksums, caching, snapshot policy and durability modes live
above it, in :mod:`statekeeper.store`, so a new engine is small. Every backend passes
the shared conformance suite in ``tests/backends/conformance.py`` unmodified.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, StoreClosed
from ..records import AgentInfo, AppendRequest, AppendResult, RawEvent, RawSnapshot

__all__ = ["Backend", "Health", "validate_request"]


@dataclass(frozen=True, slots=True)
class Health:
    """Result of :meth:`Backend.health`."""

    ok: bool
    backend: str
    detail: dict[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """Storage engine contract. All methods are coroutines; implementations must be
    safe to call concurrently from one event loop."""

    #: short engine name, e.g. ``"sqlite"``
    name: str = "backend"

    @abc.abstractmethod
    async def append(self, request: AppendRequest) -> AppendResult:
        """Atomically append ``request.events`` (and its snapshot) if the head matches.

        Raises :class:`~statekeeper.errors.ConflictError` (nothing written) when the
        stored head is not ``request.expected_seq`` and the idempotency key is new.
        """

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        """Apply several appends, sharing one commit where the engine allows it.

        Each request succeeds or fails on its own (a conflict in one does not undo the
        others); the result list holds an :class:`AppendResult` or the exception for
        each request, in order. The default runs them one by one.
        """
        results: list[AppendResult | BaseException] = []
        for request in requests:
            try:
                results.append(await self.append(request))
            except StoreClosed:
                raise  # not a failure of one request: the whole backend is gone
            except Exception as exc:
                results.append(exc)
        return results

    @abc.abstractmethod
    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        """The result of the append that used idempotency ``key``, with
        ``duplicate=True``; None if no append of the agent used it."""

    @abc.abstractmethod
    async def head(self, agent_id: str) -> int:
        """The last seq of the agent's stream (0 when the agent has no stream)."""

    @abc.abstractmethod
    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        """Events with ``after_seq < seq <= to_seq`` in seq order (at most ``limit``)."""

    @abc.abstractmethod
    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        """The last seq whose event timestamp is ``<= timestamp`` (0 if none)."""

    @abc.abstractmethod
    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        """Store a snapshot (replacing one at the same seq). The event at its seq must exist."""

    @abc.abstractmethod
    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        """The snapshot with the highest seq ``<= at_or_below`` (any seq when None)."""

    @abc.abstractmethod
    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """Agents ordered by id, strictly after ``after``, at most ``limit`` of them."""

    @abc.abstractmethod
    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent's events, snapshots and idempotency keys. True if it existed."""

    @abc.abstractmethod
    async def health(self) -> Health:
        """Check the engine answers; never raises for an unhealthy engine."""

    async def count_agents(self) -> int:
        """How many agents have a stream. The default pages through :meth:`list_agents`."""
        total, after = 0, None
        while True:
            page = await self.list_agents(after=after, limit=1000)
            total += len(page)
            if len(page) < 1000:
                return total
            after = page[-1].agent_id

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads. Further calls raise ``StoreClosed``."""


def validate_request(request: AppendRequest) -> None:
    """Reject a malformed append before any engine touches it.

    Events must be non-empty and numbered ``expected_seq + 1`` onward without gaps; a
    snapshot, if any, must sit on one of the appended seqs.
    """
    if request.expected_seq < 0:
        raise ConfigurationError(f"expected_seq must be >= 0, got {request.expected_seq}")
    if not request.events:
        raise ConfigurationError("an append needs at least one event")
    for offset, event in enumerate(request.events, start=1):
        if event.seq != request.expected_seq + offset:
            raise ConfigurationError(
                f"event seq {event.seq} does not follow expected_seq {request.expected_seq}"
                f" at position {offset}"
            )
    snap = request.snapshot
    if snap is not None and not (request.expected_seq < snap.seq <= request.events[-1].seq):
        raise ConfigurationError(f"snapshot seq {snap.seq} is not one of the appended seqs")
