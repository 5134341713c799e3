"""An operation the engine gave up retrying says whether it may have taken effect.

A server backend retries an operation whose connection was lost
(``backends/recovery.py``, ``Reconnecting.run``) and gives up after ``retry_timeout``
with :class:`~statekeeper.errors.BackendError`. Its ``maybe_applied`` is what a caller
relies on to decide between "retry it" and "find out what happened first" (a lease
granted, a snapshot stored, a delete done on a try whose reply was lost). It said
False ("not applied") whatever the tries did; now it is False only when no try reached
the server (every failure was one the engine knows happened before sending, such as a
pool timeout)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from statekeeper.backends.recovery import Reconnecting
from statekeeper.errors import BackendError


class ConnectionLost(OSError):
    """The driver's error for a connection lost after the request was sent."""


class PoolTimeout(OSError):
    """The driver's error for a request that never left the pool (not sent)."""


def _reconnecting() -> Reconnecting:
    return Reconnecting(
        engine="test",
        timeout=lambda: 0.0,  # give up after the first failed try: no waiting
        errors=(OSError,),
        transient=lambda exc: True,
        reason=str,
        reject=lambda what, exc: BackendError(what),
        is_closed=lambda: False,
        check_open=lambda: None,
        logger=logging.getLogger("tests.recovery"),
        unsent=lambda exc: isinstance(exc, PoolTimeout),
    )


def _failing(exc: BaseException) -> Callable[[], Awaitable[None]]:
    async def op() -> None:
        raise exc

    return op


def test_a_try_that_reached_the_server_may_have_applied() -> None:
    with pytest.raises(BackendError) as caught:
        asyncio.run(_reconnecting().run("lease_acquire", _failing(ConnectionLost("reset"))))
    assert caught.value.maybe_applied is True


def test_a_try_that_never_left_the_pool_did_not_apply() -> None:
    with pytest.raises(BackendError) as caught:
        asyncio.run(_reconnecting().run("lease_acquire", _failing(PoolTimeout("pool"))))
    assert caught.value.maybe_applied is False
