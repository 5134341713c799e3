"""``audit_lock_timeout`` becomes PostgreSQL's ``lock_timeout`` (milliseconds, an int4)
in every governed write's wait for the audit log's head (and under row security the
feed's lock): a larger one was accepted, then every governed write refused
(``BackendRejected``: invalid value for parameter "lock_timeout"). Since 0 ("no bound")
is refused, a huge value with ``socket_timeout=inf`` is what a caller reaches for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConfigurationError
from statekeeper.governance import Audit, parse_policy

from ..backends._services import fresh_url
from .conftest import KEYRING, POLICY_TEXT


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as made:
        yield made


def test_an_audit_lock_timeout_past_lock_timeouts_range_is_refused() -> None:
    inf = float("inf")
    with pytest.raises(ConfigurationError, match=r"audit_lock_timeout \(10000000\.0 s\)"):
        PostgresBackend("postgresql://u@h/db", socket_timeout=inf, audit_lock_timeout=1e7)
    with pytest.raises(ConfigurationError, match=r"at most 2147483\.647 s"):
        PostgresBackend("postgresql://u@h/db", socket_timeout=inf, audit_lock_timeout=2147483.7)


async def test_the_longest_audit_lock_timeout_writes(url: str) -> None:
    async with StateStore(
        f"{url}&socket_timeout=inf&audit_lock_timeout=2147483.647",
        keyring=KEYRING,
        principal="ops",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    ) as store:
        await store.save("acme/support/t1", {"n": 1})
        assert (await store.load("acme/support/t1")).data == {"n": 1}
