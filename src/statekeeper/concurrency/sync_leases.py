"""Leases with fencing, blocking: :class:`SyncLeaseManager` and :class:`SyncLease` over a
:class:`~statekeeper.SyncStateStore` (see :mod:`.sync`).

The lease is the async :class:`~statekeeper.concurrency.Lease`, driven from sync code;
its heartbeat is a task on the sync store's loop, which runs on a thread of its own —
so it keeps renewing the lease while your code blocks (a long LLM call, a slow
request). A :class:`SyncLease` is what writes take (``store.save(..., lease=lease)``,
``store.agent(id, lease=lease)``, :class:`~.sync.SyncSteps`, :func:`.sync.update`):
they carry its fencing token, and a write under a lease that was taken over is refused
by the storage with :class:`~statekeeper.errors.LeaseLost`, as in async code.

Closing the store releases the leases its managers granted that are still held (their
heartbeats stop), before the store itself closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgument
from ..store.sync import SyncStateStore
from .leases import Lease, LeaseManager

if TYPE_CHECKING:
    from ..errors import LeaseLost
    from ..records import Fence, LeaseInfo
    from ..store.portal import Portal

__all__ = ["SyncLease", "SyncLeaseManager"]

#: what ``on_lost`` is called with: the lease and the error its renewal met
OnLost = Callable[["SyncLease", BaseException], Any]


class SyncLease:
    """A granted lease, blocking (see :class:`~statekeeper.concurrency.Lease`): pass it
    to writes so that they carry its fencing token."""

    def __init__(self, lease: Lease, manager: SyncLeaseManager) -> None:
        #: the async lease this drives (its state is the lease's state)
        self.lease = lease
        self.manager = manager
        self._portal: Portal = manager.store._portal

    # -- what the async lease says ------------------------------------------------------

    @property
    def agent_id(self) -> str:
        """The agent, as the caller names it."""
        return self.lease.agent_id

    @property
    def stored_id(self) -> str:
        """The agent's id as stored (see :attr:`Lease.stored_id`)."""
        return self.lease.stored_id

    @property
    def holder(self) -> str:
        """Who holds it."""
        return self.lease.holder

    @property
    def token(self) -> int:
        """Its fencing token."""
        return self.lease.token

    @property
    def ttl(self) -> float:
        """Its duration in seconds, as of the last grant or renewal."""
        return self.lease.ttl

    @property
    def expires_at(self) -> float:
        """Its expiry on the backend's clock, as of the last grant or renewal."""
        return self.lease.expires_at

    @property
    def fence(self) -> Fence:
        """``(holder, token)``: what every write under this lease carries."""
        return self.lease.fence

    @property
    def lost(self) -> bool:
        """See :attr:`Lease.lost <statekeeper.concurrency.Lease.lost>`."""
        return self.lease.lost

    @property
    def released(self) -> bool:
        """See :attr:`Lease.released <statekeeper.concurrency.Lease.released>`."""
        return self.lease.released

    def refusal(self) -> LeaseLost | None:
        """See :meth:`Lease.refusal <statekeeper.concurrency.Lease.refusal>`."""
        return self.lease.refusal()

    def remaining(self) -> float:
        """See :meth:`Lease.remaining <statekeeper.concurrency.Lease.remaining>`."""
        return self.lease.remaining()

    # -- what it does, on the store's loop ----------------------------------------------

    def renew(self, ttl: float | None = None) -> None:
        """See :meth:`Lease.renew <statekeeper.concurrency.Lease.renew>`."""
        self._portal.call(self.lease.renew(ttl))

    def release(self) -> bool:
        """See :meth:`Lease.release <statekeeper.concurrency.Lease.release>`."""
        released = self._portal.call(self.lease.release())
        self.manager.store._close_alone(self.lease)
        return released

    def start_heartbeat(
        self,
        interval: float | None = None,
        *,
        on_lost: Callable[[SyncLease, BaseException], Any] | None = None,
    ) -> None:
        """See :meth:`Lease.start_heartbeat <statekeeper.concurrency.Lease.start_heartbeat>`:
        the renewals run on the store's loop while this thread does anything else.
        ``on_lost(lease, error)`` runs in a worker thread (it may use the sync store)."""
        beat = self.manager._sync_on_lost(on_lost, self)
        self._portal.call(_start_heartbeat(self.lease, interval, beat))

    def stop_heartbeat(self) -> None:
        """See :meth:`Lease.stop_heartbeat <statekeeper.concurrency.Lease.stop_heartbeat>`."""
        self._portal.call(self.lease.stop_heartbeat())

    def __enter__(self) -> SyncLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Sync{self.lease!r}"


async def _start_heartbeat(lease: Lease, interval: float | None, on_lost: Any) -> None:
    lease.start_heartbeat(interval, on_lost=on_lost)  # (on the loop the task runs on)


class SyncLeaseManager:
    """:class:`~statekeeper.concurrency.LeaseManager`, blocking: acquires leases on the
    agents of a :class:`~statekeeper.SyncStateStore` for one holder.

    Args:
        target: the sync store.
        holder: this worker's id (default :func:`~statekeeper.concurrency.default_holder`).
        ttl: the default lease duration in seconds.
    """

    def __init__(
        self,
        target: SyncStateStore,
        *,
        holder: str | None = None,
        ttl: float = 30.0,
    ) -> None:
        if not isinstance(target, SyncStateStore):
            raise InvalidArgument(
                "target", f"target must be a SyncStateStore, not {type(target).__name__}"
            )
        self.store = target
        #: the async manager this drives
        self.manager = LeaseManager(target.store, holder=holder, ttl=ttl)
        self._portal: Portal = target._portal

    @property
    def holder(self) -> str:
        """This worker's id."""
        return self.manager.holder

    @property
    def ttl(self) -> float:
        """The default lease duration in seconds."""
        return self.manager.ttl

    def acquire(
        self,
        agent_id: str,
        ttl: float | None = None,
        *,
        wait: float = 0.0,
        poll: float = 0.05,
    ) -> SyncLease:
        """See :meth:`LeaseManager.acquire <statekeeper.concurrency.LeaseManager.acquire>`."""
        # (waiting for a holder to let go: closing the store ends the wait)
        lease = self._portal.call(
            self.manager.acquire(agent_id, ttl, wait=wait, poll=poll), interruptible=wait > 0
        )
        return self._held(lease)

    def try_acquire(self, agent_id: str, ttl: float | None = None) -> SyncLease | None:
        """See :meth:`LeaseManager.try_acquire
        <statekeeper.concurrency.LeaseManager.try_acquire>`."""
        lease = self._portal.call(self.manager.try_acquire(agent_id, ttl))
        return None if lease is None else self._held(lease)

    @contextlib.contextmanager
    def hold(
        self,
        agent_id: str,
        ttl: float | None = None,
        *,
        wait: float = 0.0,
        heartbeat: bool = True,
        on_lost: Callable[[SyncLease, BaseException], Any] | None = None,
    ) -> Iterator[SyncLease]:
        """``with manager.hold(agent_id) as lease:`` — acquire, renew on the store's
        loop while the block runs (however long it blocks), release on exit (see
        :meth:`LeaseManager.hold <statekeeper.concurrency.LeaseManager.hold>`)."""
        made: list[SyncLease] = []

        def wrap(lease: Lease) -> SyncLease:
            if not made:
                made.append(self._held(lease))
            return made[0]

        beat = self._sync_on_lost(on_lost, wrap)
        with self._portal.enter(
            self.manager.hold(agent_id, ttl, wait=wait, heartbeat=heartbeat, on_lost=beat)
        ) as lease:
            held = wrap(lease)
            try:
                yield held
            finally:
                self.store._close_alone(lease)  # (the async hold releases it)

    def current(self, agent_id: str) -> LeaseInfo | None:
        """See :meth:`LeaseManager.current <statekeeper.concurrency.LeaseManager.current>`."""
        return self._portal.call(self.manager.current(agent_id))

    def _sync_on_lost(
        self, on_lost: OnLost | None, lease: SyncLease | Callable[[Lease], SyncLease]
    ) -> Any:
        """The async heartbeat's ``on_lost`` for a sync one: ``on_lost(sync_lease,
        error)`` run in a worker thread (off the loop, so it may call the sync store).
        None and anything not callable are given as they are (the async lease refuses
        the latter)."""
        if on_lost is None or not callable(on_lost):
            return on_lost
        callback = on_lost

        async def lost(inner: Lease, error: BaseException) -> None:
            mine = lease(inner) if callable(lease) else lease
            await asyncio.to_thread(callback, mine, error)

        return lost

    def _held(self, lease: Lease) -> SyncLease:
        held = SyncLease(lease, self)
        self.store._close_with(lease, lease.release)  # closing the store releases it
        return held

    def __repr__(self) -> str:
        return f"SyncLeaseManager(holder={self.holder!r}, ttl={self.ttl})"
