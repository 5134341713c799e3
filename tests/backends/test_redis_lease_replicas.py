"""Fencing tokens on a Redis master with a replica, without ``wait_replicas``.

Evidence first: a grant the replica never received is lost when the replica is
promoted, and the promoted master hands the same token out again (Redis has no
counter a promotion raises that a grant could read: see
``statekeeper.backends.redis.lease_replicas``). With ``wait_replicas=1`` that grant is
never acknowledged. Then the warning: a backend that grants leases on a master with
replicas it does not wait for warns once (``UnreplicatedLeaseTokens``); one that waits,
or a master without replicas, does not.

Private ``redis-server`` processes; the replica's link is awaited as a condition.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from statekeeper import StateStore, UnreplicatedLeaseTokens
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import BackendError, ConfigurationError

from ._services import PrivateRedis, private_redis

pytestmark = pytest.mark.slow


def _run(port: int, *args: object) -> Any:
    """A command on the private server at ``port``."""
    with redis.Redis(port=port) as client:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]


@pytest.fixture
def servers() -> Iterator[tuple[PrivateRedis, PrivateRedis]]:
    with private_redis() as master, private_redis() as replica:
        _run(replica.port, "REPLICAOF", "127.0.0.1", str(master.port))
        for _ in range(3000):  # (a condition: the master sees its replica; WAIT blocks)
            _run(master.port, "SET", "sk-probe", "1")
            if int(_run(master.port, "WAIT", 1, 100)) >= 1:
                break
        else:
            raise AssertionError("the replica never connected")
        yield master, replica


async def test_a_grant_lost_in_a_failover_gives_its_token_again(
    servers: tuple[PrivateRedis, PrivateRedis],
) -> None:
    master, replica = servers
    async with StateStore(master.url + "?prefix=ff:", witness=False) as store:
        with pytest.warns(UnreplicatedLeaseTokens):
            first = await LeaseManager(store, holder="w1", ttl=0.01).acquire("job")
        _run(master.port, "WAIT", 1, 0)  # (on the replica)
        _run(replica.port, "REPLICAOF", "NO", "ONE")
        lost = await LeaseManager(store, holder="w2").acquire("job", wait=30)
        assert (first.token, lost.token) == (1, 2)
    async with StateStore(replica.url + "?prefix=ff:", witness=False) as promoted:
        again = await LeaseManager(promoted, holder="w3").acquire("job", wait=30)
        assert again.token == lost.token  # two holders, one token: why the warning


async def test_with_wait_replicas_the_lost_grant_is_never_acknowledged(
    servers: tuple[PrivateRedis, PrivateRedis],
) -> None:
    master, replica = servers
    # (WAIT returns once the replica has it: the bound only delays the refusal below;
    # kept under the socket timeout, 5 s, which a WAIT reply must beat)
    url = master.url + "?prefix=ff:&wait_replicas=1&wait_timeout=2"
    async with StateStore(url, witness=False) as store:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnreplicatedLeaseTokens)
            first = await LeaseManager(store, holder="w1", ttl=0.01).acquire("job")
        assert first.token == 1
        _run(replica.port, "REPLICAOF", "NO", "ONE")
        with pytest.raises(BackendError, match="acknowledged by 0 of 1 replicas"):
            # no replica holds the grant: no token handed out
            await LeaseManager(store, holder="w2").acquire("job", wait=30)


async def test_no_warning_without_replicas() -> None:
    with private_redis() as alone:
        async with StateStore(alone.url + "?prefix=ff:", witness=False) as store:
            with warnings.catch_warnings():
                warnings.simplefilter("error", UnreplicatedLeaseTokens)
                lease = await LeaseManager(store, holder="w1").acquire("job")
            assert lease.token == 1


@pytest.mark.parametrize("wait_timeout", [5.0, 60.0])
def test_a_wait_timeout_not_below_the_socket_timeout_is_refused(wait_timeout: float) -> None:
    """With ``wait_replicas``, a ``WAIT`` still blocking when the socket gives up read as a
    lost reply: the grant was then read back from the master and handed out as granted,
    replicated nowhere (h/fencefail's finding). Such a configuration is refused, naming
    both timeouts; one below the socket timeout opens."""
    from statekeeper.backends.redis.backend import RedisBackend

    with pytest.raises(ConfigurationError, match=r"wait_timeout \(\d+ s\) must be below socket"):
        RedisBackend(
            "redis://127.0.0.1:6379/0",
            wait_replicas=1,
            wait_timeout=wait_timeout,
            socket_timeout=5.0,
        )
    RedisBackend(
        "redis://127.0.0.1:6379/0", wait_replicas=1, wait_timeout=wait_timeout, socket_timeout=90.0
    )
