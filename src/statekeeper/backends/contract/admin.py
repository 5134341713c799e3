"""Part of the backend contract, the administration: drop, schema, markers, deletes,
health, counts, close, store existence, the checks a write starts with: the abstract
methods and defaults :class:`~statekeeper.backends.base.Backend` takes from
:class:`AdminContract`."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from ...errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
)
from ...records import StreamChange
from .capabilities import Capability, Health

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class AdminContract(ContractPart):
    async def drop_all(self) -> int | None:
        """Delete everything this backend stored (tests, benchmarks; irreversible).
        Capability ``DROP_ALL``."""
        raise CapabilityUnsupported(self.name, Capability.DROP_ALL.value)

    async def schema_version(self) -> int:
        """The version of the stored schema (migrated up to the installed
        statekeeper's on open). Capability ``MIGRATIONS``."""
        raise CapabilityUnsupported(self.name, Capability.MIGRATIONS.value)

    # Store-level markers: named flags the engine keeps durably for the whole store,
    # set once and never cleared (but by ``drop_all``). ``"encrypted"``: the store holds
    # records encrypted with a key (:mod:`statekeeper.store.keyguard`). An engine that
    # keeps none answers None, and the caller falls back on what the records show.

    async def read_marker(self, name: str) -> bool | None:
        """Whether the store-level marker ``name`` is set: True or False on an engine
        that keeps markers; None on one that keeps none (this default)."""
        return None

    async def set_marker(self, name: str) -> None:
        """Set the store-level marker ``name``, durably (committed when this returns).
        Nothing on an engine that keeps none (this default)."""
        return None

    @abc.abstractmethod
    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent's events, snapshots and idempotency keys. True if it existed."""

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete the agent only if its head is still ``head`` (>= 1) and, with
        ``checksum``, its head event's stored checksum is still that one: True, or
        :class:`~statekeeper.errors.ConflictError` with nothing deleted (a retention
        purge decided on a listing; a write since must not be lost). The checksum is
        the head record's identity: a stream deleted and written again up to the same
        seq by another process has another one (its link binds the timestamp and every
        record before; an encrypted record's tag its random nonce), so a caller that
        read the head record deletes that stream and no other. Engines with
        :meth:`append_together` taking a change alone (memory, SQLite) make it one
        commit there; PostgreSQL and Redis (a cluster too: one slot) override it with
        one transaction / script, tiered with its durable tier's, S3 with a claim of
        the next commit slot. The default compares the head just before deleting (a
        write between those two calls is deleted with the agent)."""
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        if self.appends_together and self.changes_alone_together:
            change = StreamChange(agent_id, delete_at=head, delete_checksum=checksum)
            await self.append_together([], [change])
            return True
        current = await self.head(agent_id)
        if current != head:
            raise ConflictError(agent_id, head, current)
        if checksum is not None and await self.head_checksum(agent_id, head) != checksum:
            raise ConflictError(agent_id, head, head)
        return await self.delete_agent(agent_id)

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

    async def count_prefix(self, prefix: str) -> int:
        """How many agents have a stream whose id starts with ``prefix`` (a store
        opened in a namespace counts ``"ns/"``). The default pages through
        :meth:`list_agents` from ``prefix`` and stops past it (O(agents counted));
        SQLite, PostgreSQL and Redis count an index range instead."""
        total, after = 0, prefix or None
        while True:
            page = await self.list_agents(after=after, limit=1000)
            for info in page:
                if not info.agent_id.startswith(prefix):
                    return total
                total += 1
            if len(page) < 1000:
                return total
            after = page[-1].agent_id

    async def close(self) -> None:
        """Release connections and threads. Further calls raise ``StoreClosed``."""

    # -- store existence (read-only opening and ``statekeeper init``) ---------------

    async def ensure_store(self) -> None:
        """Raise :class:`~statekeeper.errors.NotAStore` unless what this backend points
        at is a statekeeper store; writes nothing. Backends opened with
        ``readonly=True`` use it; the default accepts (nothing to check)."""
        return None

    async def initialize(self) -> None:
        """Create the store's structures now (idempotent), so that read-only openings
        accept it even before the first agent is written. The default does nothing
        (the engine creates them when it is opened)."""
        return None

    # -- the checks a write starts with ----------------------------------------------

    def _check_open(self) -> None:
        """Raise :class:`~statekeeper.errors.StoreClosed` once :meth:`close` ran (each
        engine that tracks it overrides this, naming itself); the default accepts."""
        return None

    def _check_writable(self) -> None:
        """Raise :class:`~statekeeper.errors.ReadOnlyStore` when opened with
        ``readonly=True`` (each engine that can be overrides this, naming itself); the
        default accepts."""
        return None

    def _check_can_write(self) -> None:
        """Both checks a write starts with: closed first, then read-only."""
        self._check_open()
        self._check_writable()
