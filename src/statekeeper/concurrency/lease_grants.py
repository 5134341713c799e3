"""A lease grant that a cancelled ``acquire`` gives back (:class:`.leases.LeaseManager`),
one whose reply was lost recognised (:func:`recognised`), and the end of a heartbeat
that keeps its caller's cancellation (:func:`ended`).

The request that grants a lease (``Backend.acquire_lease``, or a grant committed with
its audit entry) is not interrupted when its caller is cancelled — a SQLite writer
thread cannot be, a server may already have applied it — and its caller never gets the
:class:`~.leases.Lease` that could release it. Without these helpers a cancelled
``acquire`` (``asyncio.wait_for``, a cancelled task group, Ctrl-C in the sync face)
whose grant committed kept the lease held for its whole TTL, every other worker
refused (tests/concurrency/test_lease_acquire_cancelled.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import BackendError, StatekeeperError

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..records import LeaseInfo

__all__ = ["ended", "granting", "kept", "lease_clock", "recognised", "releasing"]

logger = logging.getLogger("statekeeper.concurrency.leases")

_G = TypeVar("_G")

#: the clock a held lease's time left is counted on: one that keeps counting while the
#: machine is suspended (Linux's CLOCK_BOOTTIME). ``time.monotonic`` stops then, so a
#: holder resumed after a VM pause longer than its TTL was told its lease had time
#: left while the backend's clock had expired it and another worker could hold it.
_BOOT = getattr(time, "CLOCK_BOOTTIME", None)
lease_clock: Callable[[], float] = (
    time.monotonic if _BOOT is None else lambda: time.clock_gettime(_BOOT)  # type: ignore[arg-type]
)

#: give-backs of grants whose acquire was cancelled again meanwhile (kept referenced)
_GIVING_BACK: set[asyncio.Future[None]] = set()


async def granting(
    request: Coroutine[Any, Any, _G], give_back: Callable[[_G], Awaitable[Any]]
) -> _G:
    """``request`` (a grant) awaited; when the caller is cancelled meanwhile, the
    request runs to its end and a grant it made is given back (``give_back(granted)``)
    before the cancellation is raised. Cancelled again while giving it back, the
    give-back goes on in the background."""
    grant = asyncio.ensure_future(request)
    try:
        return await asyncio.shield(grant)
    except asyncio.CancelledError:
        back = asyncio.ensure_future(_give_back(grant, give_back))
        _GIVING_BACK.add(back)
        back.add_done_callback(_GIVING_BACK.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(back)
        raise


async def recognised(
    request: Awaitable[_G],
    backend: Backend,
    agent_id: str,
    holder: str,
    *,
    after: int | None = None,
) -> _G | LeaseInfo:
    """``request`` (``backend.acquire_lease(agent_id, holder, ...)``, or on an audited
    store the grant committed with its entry, ``AuditLog.record_with_change``) awaited.
    When it fails with :class:`~statekeeper.errors.BackendError` the grant may stand
    all the same: its reply was lost and the engine gave up retrying (its error then
    says ``maybe_applied``, but not whose grant stands). The lease is read
    then (that path only): a running lease of ``holder`` is that grant — or one the
    holder had already, which it holds all the same — and is returned; otherwise the
    error is raised. Before, the grant was held for its whole TTL with no
    :class:`~.leases.Lease` to release it, and the caller's retry through another
    manager (another holder) was refused by it
    (tests/concurrency/test_lease_grant_reply_lost.py).

    ``after``: the fencing token stored before the grant, on an audited store, whose
    log must say exactly what happened: only a lease granted since (a bigger token)
    is the grant; the holder's older lease is not, the error is raised and the
    grant's entry voided (tests/governance/test_audit_lease_reply_lost.py)."""
    try:
        return await request
    except BackendError as exc:
        try:
            info = await backend.get_lease(agent_id)
        except StatekeeperError:
            raise exc from None  # (what the grant met: the read says nothing more)
        clock = getattr(backend, "clock", None)
        now = clock() if callable(clock) else time.time()
        if info is None or info.holder != holder or info.expires_at <= now:
            raise
        if after is not None and info.token <= after:
            raise  # the holder's lease from before: this grant did not stand
        logger.warning("lease of %r granted, its reply lost (%s): recognised", agent_id, exc)
        return info


async def kept(step: Awaitable[_G], release: Callable[[], Awaitable[Any]]) -> _G:
    """``step`` of an acquire after its lease was granted: when it fails or is
    cancelled the caller never gets the lease, so ``release()`` is awaited first
    (shielded; its own failure logged, the step's error raised)."""
    try:
        return await step
    except BaseException:
        back = asyncio.ensure_future(_released(release))
        _GIVING_BACK.add(back)
        back.add_done_callback(_GIVING_BACK.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(back)
        raise


def releasing(lease: Any) -> Callable[[object], Awaitable[Any]]:
    """A ``give_back`` for :func:`granting` that releases ``lease`` (made before the
    grant, at the token it asks for), whatever the grant returned."""
    return lambda _: lease.release()


async def _give_back(grant: asyncio.Future[_G], give_back: Callable[[_G], Awaitable[Any]]) -> None:
    try:
        granted = await grant
    except BaseException:  # nothing granted (refused, failed, cancelled itself)
        return
    await _released(lambda: give_back(granted))


async def _released(release: Callable[[], Awaitable[Any]]) -> None:
    try:
        await release()
    except Exception as exc:  # it runs out at its TTL
        logger.warning("giving back a lease its acquire did not hand over failed: %s", exc)


async def ended(task: asyncio.Task[Any]) -> None:
    """Cancel a helper ``task`` (a lease's heartbeat) and wait for its end: its own
    cancellation is absorbed, the caller's is raised. Was ``with
    suppress(CancelledError): await task``, which swallowed the caller's too — a
    ``release()`` cancelled while the heartbeat ended went on and returned as if it was
    not (``asyncio.timeout`` around it never fired;
    tests/concurrency/test_lease_stop_cancelled.py)."""
    current = asyncio.current_task()
    # counted before: a caller already being cancelled (hold()'s exit after its block
    # was) still waits for the heartbeat's end and releases; only a cancellation that
    # arrives during this wait is the caller's own
    before = current.cancelling() if current is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > before:
            raise
