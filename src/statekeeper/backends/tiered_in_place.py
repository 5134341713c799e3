"""The in-place reads of :class:`~statekeeper.backends.tiered.TieredBackend`: read-only,
or within :meth:`~TieredInPlace.in_place` (``verify``, a backup), a demoted agent is read
from the cold tier — once its cold copy is checked to be the stream this store demoted —
and nothing is rehydrated, filled into the hot tier or counted as used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import orjson

from ..errors import IntegrityError
from .base import Backend
from .tiered_claims import is_claim, is_marker
from .tiered_cold import check_demoted_copy
from .tiered_rehydrate import TieredRehydrate

__all__ = ["TieredInPlace"]

#: the tiered backends (by ``id``) whose reads this task makes in place (``in_place``)
_IN_PLACE: ContextVar[frozenset[int]] = ContextVar(
    "statekeeper_tiered_in_place", default=frozenset()
)


#: the demoted agents whose cold copy this task checked within ``in_place`` (by tiered
#: backend and marker): ``verify`` reads an agent in several calls, checked once
_CHECKED: ContextVar[set[tuple[int, str, bytes]] | None] = ContextVar(
    "statekeeper_tiered_cold_checked", default=None
)


class TieredInPlace(TieredRehydrate):
    """The in-place read part of :class:`~statekeeper.backends.tiered.TieredBackend`."""

    @contextlib.contextmanager
    def in_place(self) -> Iterator[None]:
        """Within it, this task's reads are those of a read-only store: a demoted agent
        is read from the cold tier (a part left by a killed rehydration too), nothing
        is rehydrated, filled into the hot tier or counted as used — ``verify`` and a
        backup read every agent, and used to bring every demoted one back. Writes are
        unchanged."""
        token = _IN_PLACE.set(_IN_PLACE.get() | {id(self)})
        checked = _CHECKED.set(set() if _CHECKED.get() is None else _CHECKED.get())
        try:
            yield
        finally:
            _CHECKED.reset(checked)
            _IN_PLACE.reset(token)

    def _in_place(self) -> bool:
        """Read where the agent is (read-only, or within :meth:`in_place`)."""
        return self.readonly or id(self) in _IN_PLACE.get()

    async def _reader(self, agent_id: str) -> Backend:
        """Read-only: the tier that holds the agent — the durable tier, or the cold
        tier when the agent has no durable stream but a durable marker (demoted)."""
        cold = self.cold
        if cold is None or is_marker(agent_id):
            return self.durable
        head = await self.durable.head(agent_id)
        if 0 < self._settled.get(agent_id, head + 1) <= head:
            return self.durable
        entry = await self._marker_entry(agent_id)
        if entry is None:
            if head > 0:
                self._settle_at(agent_id, head)
            return self.durable
        # (a durable stream below the marker's head: what a rehydration copied so far)
        if head >= entry[0].head_seq or is_claim(entry[1]):
            return self.durable
        # read as the agent only once it is the stream this store demoted: verify, a
        # backup and a read-only store (show, history) read an altered, missing or
        # swapped copy as the agent, "OK" (their reads now raise IntegrityError)
        checked = _CHECKED.get()
        key = (id(self), agent_id, orjson.dumps(entry[1]))
        if checked is None or key not in checked:
            try:
                await check_demoted_copy(cold, agent_id, entry[1], "it was not read")
            except IntegrityError:
                # brought back by another process meanwhile (its cold copy deleted)?
                # then the durable tier holds it whole: read there
                again = await self._marker_entry(agent_id)
                if again is None or again[1] != entry[1]:
                    return self.durable
                if await self.durable.head(agent_id) >= again[0].head_seq:
                    return self.durable
                raise
            if checked is not None:
                checked.add(key)
        return cold
