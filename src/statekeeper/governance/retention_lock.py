"""One retention run at a time per store: the run lock of :func:`apply_retention`.

Two runs at once on one store (a cron job overlapping the next, two operators) would
each plan the same agents from what is stored and race each other's changes agent by
agent. So a run (not a dry run: it changes nothing) first takes the store's **run
lock**: a lease (:mod:`statekeeper.concurrency.leases`) on a reserved id of the store's
own (``RUN_LOCKS + "retention"``; a run through a store opened in a namespace locks
that namespace, ``RUN_LOCKS + "retention/" + namespace``), on the engine itself, so it
holds across processes and machines. The run renews it while it runs and releases it
at its end; a second run finds it held and is refused at once with
:class:`~statekeeper.errors.RetentionRunning`, naming the holder (pid, host, principal)
and when its lease expires, before anything is read or changed. A run in a namespace
is refused too while a run on the whole store or on a namespace above it holds its
lock, and (where the engine lists its leases, ``Capability.LEASE_LIST``) a run on the
whole store while one below runs.

A run whose process crashed renews nothing: its lease expires (``LOCK_TTL`` seconds
after its last renewal) and the next run takes the lock and goes on where it stopped
(``after=``, the CLI's progress file). A run paused past its lease (a frozen machine)
whose lock another run took meanwhile stops before its next agent
(:class:`~statekeeper.errors.LeaseLost`): before each agent, a lease due to expire
within a third of its time (the renewal task is late) is renewed first.

Under PostgreSQL row security the server decides who takes a run lock
(``sql/row_security_runlock.sql``): the role of an admin of the namespace swept and of
every namespace below it takes that namespace's, the role of an admin of every namespace
the whole store's; a lock is read only by the roles admin above, at or below its
namespace (another tenant's runs and holders are hidden). An engine without leases
(``supports_leases`` False: the S3 archive tier) has no run lock, nor a run whose
database role is refused it (a writer's, or row security enforced before run locks
were): there runs are not serialized (each change is still checked against what its plan
read, and one that lost a race is reported ``skipped``), and
``RetentionReport.unlocked`` says why (the CLI in a warning line).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from ..arguments import RUN_LOCKS
from ..backends.base import Backend, Capability
from ..errors import AccessDenied, LeaseHeld, LeaseLost, RetentionRunning
from ..records import LeaseInfo
from ..store.governed import governance_of
from .hooks import store_namespace

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["LOCK_TTL", "lock_id", "run_locked", "still_locked"]

#: seconds a run's lock outlives its last renewal (renewed every third of it)
LOCK_TTL = 60.0

_LOCK: ContextVar[_RunLock | None] = ContextVar("statekeeper_retention_lock", default=None)


def lock_id(namespace: str) -> str:
    """The reserved id of the run lock of a run over ``namespace`` ("": the store)."""
    return RUN_LOCKS + "retention" + (f"/{namespace}" if namespace else "")


def _holder(store: StateStore) -> str:
    """Who a run is, as a refused run names it (unique per run: a lease held by the same
    holder is granted again)."""
    principal = getattr(governance_of(store), "principal", None)
    who = f", principal {principal!r}" if isinstance(principal, str) else ""
    return (
        f"retention run pid {os.getpid()} on {socket.gethostname()}{who} ({uuid.uuid4().hex[:8]})"
    )


class _RunLock:
    def __init__(self, backend: Backend, info: LeaseInfo, ttl: float) -> None:
        self.backend, self.info, self.ttl = backend, info, ttl
        self.lost: LeaseLost | None = None
        #: when the lease expires (the engine's clock) as its last grant or renewal said
        self.expires = info.expires_at

    async def renew(self) -> None:
        info = self.info
        assert info.holder is not None
        try:
            renewed = await self.backend.renew_lease(
                info.agent_id, info.holder, info.token, self.ttl
            )
        except LeaseLost as exc:
            self.lost = exc
            raise
        self.expires = max(self.expires, renewed.expires_at)

    async def renewing(self) -> None:
        while True:
            await _pause(self.ttl / 3)
            try:
                await self.renew()
            except LeaseLost:
                return
            except Exception:  # (a blip: tried again at the next third, before expiry)
                continue


async def _pause(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def still_locked() -> None:
    """Raise :class:`LeaseLost` when the running task's run lock was taken over by
    another run (this one paused past its lease): checked before each agent. A lease
    due to expire within a third of its time (the renewal task is late: the process
    or machine was paused) is renewed here first (was: the run went on to its next
    agents until the renewal task's turn, alongside the run that took the lock)."""
    held = _LOCK.get()
    if held is None:
        return
    now = _now(held.backend)
    if held.lost is None and now >= held.expires - held.ttl / 3:
        try:
            await held.renew()
        except LeaseLost:
            pass
        except Exception:  # (a blip: the lease still holds; past it, the run stops)
            if now >= held.expires:
                raise
    if held.lost is not None:
        raise held.lost


def _refusal(namespace: str, exc: LeaseHeld | LeaseInfo) -> RetentionRunning:
    assert exc.holder is not None
    scope = exc.agent_id.removeprefix(lock_id(""))
    return RetentionRunning(scope.removeprefix("/") if scope else "", exc.holder, exc.expires_at)


async def _overlapping(backend: Backend, namespace: str) -> LeaseInfo | None:
    """A running lock of a run over the whole store or a namespace above ``namespace``,
    or (listed where the engine can) one below it."""
    parts = namespace.split("/") if namespace else []
    for i in range(len(parts)):
        found = await backend.get_lease(lock_id("/".join(parts[:i])))
        if found is not None and found.holder is not None and found.expires_at > _now(backend):
            return found
    if not backend.supports(Capability.LEASE_LIST):
        return None
    below = lock_id(namespace) + "/"
    after = below
    while True:
        page = await backend.list_leases(after, 100)
        for info in page:
            if not info.agent_id.startswith(below):
                return None
            if info.holder is not None and info.expires_at > _now(backend):
                return info
        if len(page) < 100:
            return None
        after = page[-1].agent_id


def _now(backend: Backend) -> float:
    import time

    clock = getattr(backend, "clock", None)
    return float(clock()) if callable(clock) else time.time()


#: why a run holds no run lock (RetentionReport.unlocked)
NO_LEASES = "the engine has no leases"
ROLE_REFUSED = (
    "the database role may not take the store's run lock (PostgreSQL row security: only"
    " the roles of principals admin of the namespace and of all below it, by a pattern"
    " ending in '**', do; a schema put under row security by an older statekeeper has"
    " no run-lock policies: run statekeeper.governance.policy_postgres.enforce_in_postgres"
    " again as the schema's owner)"
)


@contextlib.asynccontextmanager
async def run_locked(store: StateStore, dry_run: bool, ttl: float = LOCK_TTL) -> AsyncIterator[str]:
    """Hold the run lock of ``store`` (its namespace's) for the block; yields "" when
    one is held, else why not (a dry run needs none: "dry run"; an engine without
    leases; a role the engine refuses the lock). :class:`RetentionRunning` when
    another run holds it (nothing done)."""
    backend = store.backend
    if dry_run or _LOCK.get() is not None:
        yield "dry run" if dry_run else ""
        return
    if not backend.supports_leases:
        yield NO_LEASES
        return
    namespace = store_namespace(store)
    try:
        info = await backend.acquire_lease(lock_id(namespace), _holder(store), ttl)
    except LeaseHeld as exc:
        raise _refusal(namespace, exc) from None
    except AccessDenied:  # (row security: the run goes on unlocked, and says so)
        yield ROLE_REFUSED
        return
    assert info.holder is not None
    try:
        other = await _overlapping(backend, namespace)
        if other is not None:
            raise _refusal(namespace, other)
        held = _RunLock(backend, info, ttl)
        beat = asyncio.ensure_future(held.renewing())
        token = _LOCK.set(held)
        try:
            yield ""
        finally:
            _LOCK.reset(token)
            beat.cancel()
            # (waited for, not awaited: a cancellation of this run while its renewal
            # ends reaches the caller — suppressing the renewal's CancelledError
            # swallowed it, the cancelled run returning its report)
            await asyncio.wait({beat})
    finally:
        with contextlib.suppress(Exception):  # (else it expires: the next run waits for it)
            await backend.release_lease_again(info.agent_id, info.holder, info.token)
