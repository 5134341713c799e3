"""Fencing tokens after a failover that lost the newest commits.

A primary grants a lease (token N) its standby never receives (asynchronous streaming
replication), dies, and the standby is promoted. Before, the promoted server granted
N again: two holders with the same token, and a system outside the store that
refuses writes with a token at or below the last one it saw accepted both. A token is
now at least the floor of the server's WAL timeline ((timeline - 1) * 2^40), and a
promotion starts a new timeline: every token after it is greater than any the old
primary gave, lost or not — by ``acquire`` and by an audited grant committed with its
entry alike.

Private primary and standby (``test_postgres_replica.ReplicaPair``); conditions only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager

from .test_postgres_failover_feed import _fail_over
from .test_postgres_replica import ReplicaPair

pytestmark = pytest.mark.slow


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    servers = ReplicaPair()
    try:
        yield servers
    finally:
        servers.close()


async def test_a_token_granted_after_a_lossy_failover_is_greater_than_every_lost_one(
    pair: ReplicaPair,
) -> None:
    url = pair.primary.dsn + "?schema=agents"
    async with StateStore(url, witness=False) as store:
        first = await LeaseManager(store, holder="w1", ttl=0.01).acquire("job")
        assert first.token == 1  # a server never promoted: tokens as before
        await first.release()
    pair.caught_up()
    pair.stop_replica()  # what the primary commits now never reaches the standby
    seen: list[int] = []  # the tokens an outside system was handed, in order
    async with StateStore(url, witness=False) as store:
        for holder in ("w2", "w3"):
            lease = await LeaseManager(store, holder=holder).acquire("job")
            seen.append(lease.token)
            await lease.release()
        lost = await LeaseManager(store, holder="w4").acquire("other")
        seen.append(lost.token)
    assert seen == [2, 3, 1]

    async with StateStore(_fail_over(pair), witness=False) as store:
        after = await LeaseManager(store, holder="w5").acquire("job")
        other = await LeaseManager(store, holder="w6").acquire("other")
        # before: 2 and 1 again — the tokens w2 and w4 were handed
        assert after.token > max(seen) and other.token > max(seen)
        assert after.token == other.token == 1 << 40  # timeline 2's first
        await after.release()
        again = await LeaseManager(store, holder="w7").acquire("job")
        assert again.token == after.token + 1  # one by one within a timeline


async def test_an_audited_grant_after_a_lossy_failover_names_a_greater_token(
    pair: ReplicaPair,
) -> None:
    """The grant committed with its audit entry names its token before it is made:
    the engine's next one (``Backend.next_lease_token``), not the stored one plus one
    (which the server refuses after a promotion)."""
    from statekeeper.governance import Audit, AuditLog, parse_policy

    from ..governance.conftest import KEYRING

    policy = parse_policy('[principals.app]\nwrite = ["acme/**"]\n')

    def opened(url: str) -> StateStore:
        return StateStore(
            url, keyring=KEYRING, principal="app", policy=policy, audit=Audit(), witness=False
        )

    url = pair.primary.dsn + "?schema=agents"
    async with opened(url) as store:
        manager = LeaseManager(store, holder="w0", ttl=0.01)
        assert manager.together() is not None  # (the grant and its entry: one commit)
        await manager.acquire("acme/job")
    pair.caught_up()
    pair.stop_replica()
    async with opened(url) as store:
        lost = await LeaseManager(store, holder="w1", ttl=0.01).acquire("acme/job", wait=30)
        assert lost.token == 2

    async with opened(_fail_over(pair)) as store:
        # before: the stored token plus one (2, handed out twice)
        lease = await LeaseManager(store, holder="w2").acquire("acme/job", wait=30)
        assert lease.token == 1 << 40 and lease.token > lost.token
        log = AuditLog(store.backend, KEYRING)
        tokens = [e.detail.get("token") async for e in log.entries(operation="lease")]
        assert tokens[-1] == lease.token
