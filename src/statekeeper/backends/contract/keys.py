"""Part of the backend contract, the idempotency records (export, rename, expiry), TTLs and
held keys: the abstract methods and defaults :class:`~statekeeper.backends.base.Backend`
takes from :class:`KeysContract`."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import CapabilityUnsupported
from ...records import StreamChange
from .capabilities import Capability

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class KeysContract(ContractPart):
    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``, in
        ``first_seq`` order (empty for an unknown agent). Capability ``KEY_EXPORT``."""
        raise CapabilityUnsupported(self.name, Capability.KEY_EXPORT.value)

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """For each ``(old, new)`` of ``renames``: the agent's idempotency record stored
        as ``old`` is stored as ``new`` instead (its range and time kept), in ONE atomic
        step for all of them — after a crash, each record is under one of its two forms,
        never neither (a retry of its append is never stored again). An ``old`` not
        stored is passed over; when ``new`` is stored already, ``old`` is only dropped.
        Returns how many records were renamed. Capability ``KEY_RENAME`` (``rekey``:
        see :mod:`statekeeper.security.rekey_keys`).

        ``guard`` (an engine with :attr:`guards_renames`; see
        :func:`validate_rename_guard`): a check of another stream made in the same
        atomic step — its absence, or its head still ``guard.rewrite``'s
        ``(expected_seq, expected_tag)`` (its ``head_tag``, if any, stored there
        too) — else :class:`~statekeeper.errors.ConflictError` naming that stream and
        nothing renamed."""
        raise CapabilityUnsupported(self.name, Capability.KEY_RENAME.value)

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Forget the idempotency records of ``agent_id`` (of every agent when None)
        made before ``before`` (epoch seconds), in one atomic step; how many were
        forgotten. A record's time (``created_at``, epoch seconds) is the timestamp of
        the first event of the append that made it (the store's clock at the save), so
        a record copied with its events (a restore, a tier move) keeps it; a record
        stored without its append (the kept records of a compacted stream's import,
        :meth:`append_from_base`) has the time it was stored. Events, snapshots and the
        head are untouched: only a retry of an expired append is no longer recognised
        (it is stored again). A durable step's record (a key starting with
        :data:`~statekeeper.records.STEP_KEY_PREFIX`, ``"step:"``) is never forgotten:
        it is what makes the step run once, and a retry of the step after its record
        was forgotten would run its side effect again; it goes with the agent. With
        ``count_only``, nothing is forgotten: how many would be (a dry run).
        Capability ``KEY_EXPIRY``; the default refuses."""
        raise CapabilityUnsupported(self.name, Capability.KEY_EXPIRY.value)

    async def set_ttl(self, agent_id: str, ttl: float | None) -> bool:
        """Let the agent expire ``ttl`` seconds after its last write (None: never).
        False when the agent does not exist. Capability ``TTL``."""
        raise CapabilityUnsupported(self.name, Capability.TTL.value)

    async def hold_keys(self, pattern: str, held: bool) -> int:
        """Keep the agents ``pattern`` covers (an agent id or ``NAMESPACE/*``) from
        expiring by the engine's own TTL while a legal hold on it is ``held``; released,
        their TTL applies again. Returns how many stored agents it covers. An engine
        without a TTL (capability ``TTL``) expires nothing by itself: nothing to do, 0.
        Called by :mod:`statekeeper.governance.holds` as holds are placed and released."""
        return 0
