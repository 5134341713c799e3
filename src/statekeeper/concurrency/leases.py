"""Leases with fencing tokens: one worker owns an agent at a time — provably.

A lease gives one holder the exclusive right to write an agent for ``ttl`` seconds.
Its holder renews it (a heartbeat) while working and releases it when done; when the
holder dies, the lease expires and another worker takes the agent over.

Expiry alone is not safety. A holder can be paused — a GC pause, ``SIGSTOP``, a VM
migration, a swapped-out page — for longer than its TTL without noticing; meanwhile
the lease expires and a second worker takes over. When the first one resumes, it still
believes it holds the lease. Every grant therefore comes with a **fencing token** that
grows with each grant (Kleppmann, "How to do distributed locking", 2016), every write
made under the lease carries it, and **the storage itself** refuses a write whose
token is no longer the agent's newest, in the same atomic step as the append
(:class:`~statekeeper.errors.LeaseLost`). The paused worker's late writes are
rejected; the new owner's work is never overwritten.

>>> import asyncio
>>> from statekeeper import StateStore
>>> from statekeeper.errors import LeaseLost
>>> async def demo():
...     async with StateStore("memory://") as store:
...         alice = LeaseManager(store, holder="alice")
...         bob = LeaseManager(store, holder="bob")
...         old = await alice.acquire("agent-1", ttl=0.05)
...         await store.save("agent-1", {"by": "alice"}, lease=old)
...         await asyncio.sleep(0.1)           # alice is paused past her TTL ...
...         new = await bob.acquire("agent-1", ttl=10)   # ... so bob takes over
...         await store.save("agent-1", {"by": "bob"}, lease=new)
...         try:
...             await store.save("agent-1", {"by": "alice, late"}, lease=old)
...         except LeaseLost as exc:
...             print("refused:", exc.token, "<", exc.current_token)
...         return (await store.load("agent-1")).data
>>> asyncio.run(demo())
refused: 1 < 2
{'by': 'bob'}
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..arguments import check_agent_id, check_name
from ..backends.base import Backend, released_with, validate_ttl
from ..errors import AccessDenied, ConflictError, InvalidArgument, LeaseHeld, LeaseLost
from ..records import Fence, LeaseChange, LeaseInfo, StreamChange
from .lease_grants import ended, granting, kept, lease_clock, recognised, releasing

if TYPE_CHECKING:
    from ..store.namespaced import NamespacedStateStore
    from ..store.store import StateStore

__all__ = ["Lease", "LeaseManager", "default_holder"]

logger = logging.getLogger("statekeeper.concurrency.leases")

_E = TypeVar("_E", bound=BaseException)


def default_holder() -> str:
    """A new holder id, ``host:pid:random``: unique per call (per manager)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """A granted lease on one agent. Pass it to writes (``store.save(..., lease=lease)``,
    ``store.agent(..., lease=lease)``) so they carry its fencing token.

    ``expires_at`` is the expiry on the backend's clock as of the last grant or
    renewal; :meth:`remaining` is this process's conservative estimate on a clock that
    counts a suspended machine's pause (``lease_clock``), measured from *before* the
    request was sent. Neither decides whether a write is accepted: the token check does.
    """

    def __init__(self, manager: LeaseManager, info: LeaseInfo, ttl: float, sent_at: float) -> None:
        self.manager = manager
        #: the id as stored (``acme/support/a-1`` for a lease taken through a store
        #: opened in namespace ``acme/support``); :attr:`agent_id` is the caller's
        self.stored_id = info.agent_id
        self.agent_id = manager.relative(info.agent_id)
        self.holder = info.holder or manager.holder
        self.token = info.token
        self.ttl = ttl
        self.expires_at = info.expires_at
        self._deadline = sent_at + ttl
        self._lost: LeaseLost | None = None
        self._released = False
        #: a release was sent and failed (raised, or cancelled): it may have been
        #: applied, so the next one is sent as a retry (``release_lease_again``)
        self._release_unsure = False
        self._heartbeat: asyncio.Task[None] | None = None
        #: set by :meth:`stop_heartbeat`: the heartbeat ends at its next step even when
        #: its cancellation was lost below it (see :meth:`_beat`)
        self._stop_beating: asyncio.Event | None = None

    @property
    def fence(self) -> Fence:
        """``(holder, token)``: what every write under this lease carries."""
        return (self.holder, self.token)

    @property
    def lost(self) -> bool:
        """True once a renewal learned the lease was taken over (or released elsewhere)."""
        return self._lost is not None

    @property
    def released(self) -> bool:
        """True after :meth:`release`."""
        return self._released

    def refusal(self) -> LeaseLost | None:
        """The :class:`~statekeeper.errors.LeaseLost` every write under this lease will
        meet, as far as this process knows — it was :attr:`lost` or :attr:`released` —
        else None (the backend's token check still decides every write)."""
        lost = self._lost
        if lost is not None:  # (a new error each time: the caller may add notes)
            newest, by = lost.current_token, lost.current_holder
            return LeaseLost(self.agent_id, self.holder, self.token, newest, by)
        if self._released:
            return LeaseLost(self.agent_id, self.holder, self.token, self.token, None)
        return None

    def remaining(self) -> float:
        """Seconds left by this process's clock (<= 0: assume it expired)."""
        return self._deadline - lease_clock()

    async def renew(self, ttl: float | None = None) -> None:
        """Extend the lease by ``ttl`` (default: its own TTL) from now.

        Raises :class:`~statekeeper.errors.LeaseLost` when a newer lease exists (the
        lease is then marked :attr:`lost`).
        """
        ttl = validate_ttl(ttl if ttl is not None else self.ttl)
        sent = lease_clock()
        try:
            info = await self.manager.backend.renew_lease(
                self.stored_id, self.holder, self.token, ttl
            )
        except LeaseLost as exc:
            self._lost = exc
            await self.manager.audit("lease-lost", self)
            raise self.manager.relative_error(exc) from None
        self.ttl = ttl
        self.expires_at = info.expires_at
        self._deadline = sent + ttl

    async def release(self) -> bool:
        """Stop the heartbeat and give the lease up (another worker may take it at
        once). Returns False when it had already been taken over. Idempotent.

        When the request fails (its error is raised), the lease is left as it was,
        not :attr:`released`: calling ``release()`` again tries again. The heartbeat
        stays stopped (the lease runs out at its TTL unless released or renewed).
        """
        await self.stop_heartbeat()
        if self._released:
            return False
        # marked before the first await, so that a concurrent release() sends nothing;
        # unmarked when the request fails (see _release_failed)
        self._released = True
        manager = self.manager
        gov = manager.governance
        log = manager.together()
        if log is not None and gov is not None:
            # the release and its entry in one commit (see LeaseManager.acquire)
            change = StreamChange(self.stored_id, lease=LeaseChange(self.holder, self.token))
            try:
                await log.record_with_change(
                    change,
                    "lease-release",
                    principal=gov.principal,
                    detail={"holder": self.holder, "token": self.token},
                )
            except LeaseLost:  # it had been taken over: nothing released, nothing written
                if self._release_unsure and released_with(
                    await manager.backend.get_lease(self.stored_id), self.token
                ):
                    # unless the failed try before committed it, with its entry
                    self._release_unsure = False
                    return True
                self._release_unsure = False
                await manager.audit("lease-lost", self)
                return False
            except BaseException:
                self._release_failed()
                raise
            self._release_unsure = False
            return True
        entry = None
        try:
            if gov is not None:  # the entry first (see LeaseManager.acquire)
                detail = {"holder": self.holder, "token": self.token}
                entry = await gov.ahead("lease-release", self.stored_id, detail)
            release = manager.backend.release_lease
            if self._release_unsure:  # the failed try may have released it: not "taken over"
                release = manager.backend.release_lease_again
            released = await release(self.stored_id, self.holder, self.token)
            self._release_unsure = False
        except BaseException as exc:
            self._release_failed()
            if entry is not None and gov is not None:
                await gov.voided(entry, "lease-release", self.stored_id, exc)
            raise
        if entry is None:
            await manager.audit("lease-release" if released else "lease-lost", self)
        elif not released and gov is not None:  # it had been taken over: not released
            lost = LeaseLost(self.stored_id, self.holder, self.token, 0, None)
            await gov.voided(entry, "lease-release", self.stored_id, lost)
            await manager.audit("lease-lost", self)
        return released

    def _release_failed(self) -> None:
        """A release whose request failed (the backend's error, a cancellation): not
        known to be released, so the lease stays held as far as this process knows —
        :attr:`released` False, usable for writes while its token is the newest, and
        ``release()`` sends the request again (was: marked released, and every later
        ``release()`` answered False without asking: the lease ran out at its TTL
        while the caller believed it given up). It is sent as a retry: the failed one
        may have been applied (a lost reply, a cancellation while it ran), and a plain
        release would then answer "taken over" (False) for the lease it gave up."""
        self._released = False
        self._release_unsure = True

    # -- heartbeat -------------------------------------------------------------------

    def start_heartbeat(
        self,
        interval: float | None = None,
        *,
        on_lost: Callable[[Lease, BaseException], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Renew every ``interval`` seconds (default: a third of the TTL) in a
        background task, until :meth:`release`, :meth:`stop_heartbeat`, or the lease
        is lost — then ``on_lost(lease, error)`` is called (the default logs).

        A renewal that fails for another reason (storage unreachable) is retried at
        the next beat; the lease may expire meanwhile, and the fencing token keeps
        that safe.
        """
        if self._heartbeat is not None and not self._heartbeat.done():
            return self._heartbeat
        if interval is not None:
            _check_seconds(interval, "interval", positive=True)
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument(
                "on_lost", f"on_lost must be callable or None, not {type(on_lost).__name__}"
            )
        beat = interval if interval is not None else self.ttl / 3
        self._stop_beating = stop = asyncio.Event()
        self._heartbeat = asyncio.get_running_loop().create_task(
            self._beat(beat, on_lost, stop), name=f"lease-heartbeat:{self.agent_id}"
        )
        return self._heartbeat

    async def _beat(
        self,
        interval: float,
        on_lost: Callable[[Lease, BaseException], Any] | None,
        stop: asyncio.Event,
    ) -> None:
        """Renew every ``interval`` until ``stop`` is set, the lease is released or lost.

        ``stop`` and not only the task's cancellation ends it: a cancellation that
        arrives while a renewal waits in the driver can be lost there (psycopg_pool
        waits for a free connection through Python 3.11's ``asyncio.wait_for``, which
        returns the connection and drops a cancellation that arrives as the connection
        does, gh-86296), and the heartbeat then went on renewing for ever while
        :meth:`stop_heartbeat` waited for it — the lease never expired, and no other
        worker could take the job (a pool stalled in the chaos test, CI stop 39)."""
        while not self._released:
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return  # stopped
            except TimeoutError:
                pass
            try:
                await self.renew()
            except LeaseLost as exc:
                if on_lost is not None:
                    result = on_lost(self, exc)
                    if asyncio.iscoroutine(result):
                        await result
                else:
                    logger.warning("lease on %r lost: %s", self.agent_id, exc)
                return
            except Exception as exc:  # keep beating: the next renewal may work
                if stop.is_set():
                    return
                logger.warning("renewing the lease on %r failed: %s", self.agent_id, exc)

    async def stop_heartbeat(self) -> None:
        """Stop the background renewals (the lease itself is kept until it expires)."""
        task, self._heartbeat = self._heartbeat, None
        if self._stop_beating is not None:
            self._stop_beating.set()
        if task is None or task.done() or task is asyncio.current_task():
            return
        await ended(task)  # (a cancellation of this call is raised: was swallowed)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self._released else "held"
        return f"Lease({self.agent_id!r}, holder={self.holder!r}, token={self.token}, {state})"


class LeaseManager:
    """Acquires leases on agents for one holder (a worker process).

    Args:
        target: a :class:`~statekeeper.store.StateStore` or a backend whose engine
            supports leases (memory, SQLite, PostgreSQL, Redis, tiered over one of
            those; S3 raises :class:`~statekeeper.errors.LeasesUnsupported`).
        holder: this worker's id (default :func:`default_holder`, unique per manager).
        ttl: the default lease duration in seconds.
    """

    def __init__(
        self,
        target: StateStore | Backend,
        *,
        holder: str | None = None,
        ttl: float = 30.0,
    ) -> None:
        from ..store.governed import governance_of
        from ..store.namespaced import NamespacedStateStore as Namespaced
        from ..store.store import StateStore

        if not isinstance(target, Backend | StateStore):
            raise InvalidArgument(
                "target", f"target must be a StateStore or a Backend, not {type(target).__name__}"
            )
        self.backend: Backend = target if isinstance(target, Backend) else target.backend
        # a store opened in a namespace: agent ids are relative to it (mapped to the
        # stored ids here, and back in leases, lease records and errors)
        self._view: NamespacedStateStore | None = target if isinstance(target, Namespaced) else None
        # a store opened as a principal: leases need write permission, and are audited
        self.governance = governance_of(target)
        self.holder = check_name(holder if holder is not None else default_holder(), "holder")
        self.ttl = validate_ttl(ttl)

    async def acquire(
        self,
        agent_id: str,
        ttl: float | None = None,
        *,
        wait: float = 0.0,
        poll: float = 0.05,
    ) -> Lease:
        """Take the agent's lease for ``ttl`` seconds (default: the manager's TTL).

        When another holder has it, retry for up to ``wait`` seconds (polling every
        ``poll`` seconds at most), then raise :class:`~statekeeper.errors.LeaseHeld`.
        """
        stored = self.stored_id(agent_id)
        ttl = validate_ttl(ttl if ttl is not None else self.ttl)
        _check_seconds(wait, "wait", positive=False)
        _check_seconds(poll, "poll", positive=True)
        if self.governance is not None:
            try:
                await self.governance.require(stored, "write", "lease")
            except AccessDenied as exc:
                raise self.relative_error(exc) from None
        log = self.together()
        if log is not None:
            return await self._acquire_together(log, stored, ttl, wait, poll)
        # on a store with an audit log whose engine cannot commit the lease with its
        # entry (Redis, tiered) the entry goes first: a process that dies
        # holding a lease it took has recorded it. A lease seen held by another holder
        # is refused without an attempt, so without announcing one: one entry per
        # refused call (outcome error:LeaseHeld), not an announce and its void, however
        # long a worker polls. Only an attempt that loses a race between that look and
        # the grant costs two (its announce, then its void).
        gov = self.governance
        ahead = gov is not None and callable(getattr(gov.audit, "record_ahead", None))
        entry, back = None, self.backend
        grant, token = back.acquire_lease, 0  # (token: the one the announced entry names)
        try:
            deadline = time.monotonic() + wait
            pause = min(poll, 0.005)
            while True:
                sent = lease_clock()
                held, stored_info = await self._held_elsewhere(stored) if ahead else (None, None)
                if held is None:
                    if gov is not None and entry is None:
                        # the entry names the token the grant will carry (the stored
                        # one plus one, or the engine's next); a grant that
                        # gets another (a race, an engine that skips) records it after
                        token = await back.next_lease_token(stored, stored_info)
                        detail = {"holder": self.holder, "token": token}
                        # cancelled while it is written, the entry is voided once it is
                        void = gov.voiding("lease", stored)
                        entry = await granting(gov.ahead("lease", stored, detail), void)
                    try:  # (after: only a grant since the look is this one, not an older)
                        info = await granting(
                            recognised(grant(stored, self.holder, ttl), back, stored, self.holder,
                                       after=token - 1),
                            functools.partial(self._release_grant, ttl=ttl, sent=sent),
                        )  # fmt: skip
                    except LeaseHeld as exc:
                        held = exc
                    else:
                        break
                if time.monotonic() + pause > deadline:
                    raise self.relative_error(held) from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, poll)
        except BaseException as exc:
            if entry is not None and gov is not None:
                await gov.voided(entry, "lease", stored, exc)
            elif ahead and gov is not None and isinstance(exc, LeaseHeld):
                await gov.record(
                    "lease", stored, outcome="error:LeaseHeld", detail={"holder": self.holder}
                )
            raise
        lease = Lease(self, info, ttl, sent)
        if entry is None or info.token != token:
            await kept(self.audit("lease", lease), lease.release)
        return lease

    def together(self) -> Any:
        """The store's audit log when a lease and its entry can be ONE commit (its
        engine's ``append_together``: memory, SQLite, PostgreSQL), else None (no log,
        or the entry goes first)."""
        gov = self.governance
        log = getattr(gov, "audit", None)
        if (
            log is None
            or not getattr(log, "records_with_writes", False)
            or not callable(getattr(log, "record_with_change", None))
            or getattr(log, "backend", None) is not self.backend
            or not self.backend.supports_leases
            or not self.backend.changes_leases_and_rewrites
        ):
            return None
        return log

    async def _acquire_together(
        self, log: Any, stored: str, ttl: float, wait: float, poll: float
    ) -> Lease:
        """:meth:`acquire` on an engine that commits the grant with its entry: the
        entry names the token the grant carries (``Backend.next_lease_token``; the engine
        refuses another, nothing written, and this looks again), so after a crash at
        any point the lease and its entry both exist or neither does."""
        gov = self.governance
        assert gov is not None
        deadline = time.monotonic() + wait
        pause = min(poll, 0.005)
        while True:
            sent = lease_clock()
            held, stored_info = await self._held_elsewhere(stored)
            if held is None:
                token = await self.backend.next_lease_token(stored, stored_info)
                change = StreamChange(stored, lease=LeaseChange(self.holder, token, ttl))
                made = Lease(self, LeaseInfo(stored, self.holder, token, 0.0), ttl, sent)
                try:
                    await granting(  # (one commit: a grant recognised has its entry)
                        recognised(log.record_with_change(
                            change, "lease", principal=gov.principal,
                            detail={"holder": self.holder, "token": token},
                        ), self.backend, stored, self.holder, after=token - 1),
                        releasing(made),
                    )  # fmt: skip
                except ConflictError as exc:
                    if exc.agent_id != stored:
                        raise
                    continue  # another grant came first: look again
                except LeaseHeld as exc:
                    held = exc
                else:
                    info = await kept(self.backend.get_lease(stored), made.release)
                    if info is None or info.token != token:
                        # taken over already (a TTL this short): the grant as made, lost
                        return made
                    return Lease(self, info, ttl, sent)
            if time.monotonic() + pause > deadline:
                await gov.record(
                    "lease", stored, outcome="error:LeaseHeld", detail={"holder": self.holder}
                )
                raise self.relative_error(held) from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, poll)

    async def _release_grant(self, info: LeaseInfo, *, ttl: float, sent: float) -> bool:
        return await Lease(self, info, ttl, sent).release()  # (see lease_grants.granting)

    async def _held_elsewhere(self, stored: str) -> tuple[LeaseHeld | None, LeaseInfo | None]:
        """The refusal an attempt would meet, when the stored lease is another
        holder's and still running (read, nothing written), and the stored lease
        (None: the agent was never leased). Its expiry is on the
        backend's clock (memory, SQLite: the one it was given; PostgreSQL, Redis: the
        server's, read here with this process's), so a lease this process's clock sees
        running a little longer than the server does is refused for that skew (an
        ``acquire(wait=...)`` polls past it); one it sees expired is attempted."""
        info = await self.backend.get_lease(stored)
        if info is None or info.holder is None or info.holder == self.holder:
            return None, info
        clock = getattr(self.backend, "clock", None)
        now = clock() if callable(clock) else time.time()
        if info.expires_at <= now:
            return None, info
        return LeaseHeld(stored, info.holder, info.expires_at), info

    async def try_acquire(self, agent_id: str, ttl: float | None = None) -> Lease | None:
        """The lease, or None when another holder has it."""
        try:
            return await self.acquire(agent_id, ttl)
        except LeaseHeld:
            return None

    @contextlib.asynccontextmanager
    async def hold(
        self,
        agent_id: str,
        ttl: float | None = None,
        *,
        wait: float = 0.0,
        heartbeat: bool = True,
        on_lost: Callable[[Lease, BaseException], Any] | None = None,
    ) -> AsyncIterator[Lease]:
        """``async with manager.hold(agent_id) as lease:`` — acquire, renew in the
        background while the block runs, release on exit (also on errors)."""
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument(
                "on_lost", f"on_lost must be callable or None, not {type(on_lost).__name__}"
            )
        lease = await self.acquire(agent_id, ttl, wait=wait)
        try:
            if heartbeat:
                lease.start_heartbeat(on_lost=on_lost)
            yield lease
        finally:
            await lease.release()

    async def current(self, agent_id: str) -> LeaseInfo | None:
        """The agent's newest lease as stored (possibly expired or released)."""
        stored = self.stored_id(agent_id)
        if self.governance is not None:
            try:
                await self.governance.require(stored, "read", "lease")
            except AccessDenied as exc:
                raise self.relative_error(exc) from None
        info = await self.backend.get_lease(stored)
        if info is None or self._view is None:
            return info
        return dataclasses.replace(info, agent_id=self.relative(info.agent_id))

    async def audit(self, operation: str, lease: Lease) -> None:
        """Record a lease event in the store's audit log (when it keeps one)."""
        if self.governance is not None:
            await self.governance.record(
                operation, lease.stored_id, detail={"holder": lease.holder, "token": lease.token}
            )

    # -- ids: relative to the store's namespace when it was opened in one ---------------

    def stored_id(self, agent_id: str) -> str:
        """The id the engine stores for the caller's ``agent_id``."""
        check_agent_id(agent_id)
        return agent_id if self._view is None else self._view.qualify(agent_id)

    def relative(self, stored_id: str) -> str:
        """The caller's id for the engine's ``stored_id``."""
        return stored_id if self._view is None else self._view.relative(stored_id)

    def relative_error(self, exc: _E) -> _E:
        """``exc`` naming the caller's ids (see :meth:`NamespacedStateStore.relative_error`)."""
        if self._view is not None:
            self._view.relative_error(exc)
        return exc


def _check_seconds(value: object, argument: str, *, positive: bool) -> None:
    """A finite number of seconds, > 0 (``positive``) or >= 0."""
    if (
        type(value) is bool
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        bound = "> 0" if positive else ">= 0"
        raise InvalidArgument(
            argument, f"{argument} must be a finite number of seconds {bound}, not {value!r:.40}"
        )
