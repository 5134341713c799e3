"""``LeaseManager.acquire`` on an audited store when the grant's reply is lost and the
engine gives up retrying (``BackendError``). Where the grant and its audit entry are
ONE commit (memory, SQLite, PostgreSQL, Redis) the grant was not recognised: the
acquire raised while the lease and its entry both stood, the lease held for its whole
TTL with nothing to release it. Where the entry goes first (``together`` off, as on a
Redis Cluster or a tiered store) the grant was recognised, but so was the holder's
OLDER lease when the new grant never happened: the announced entry stayed unvoided and
another entry was written, the log naming two grants where none was made.

The log must say exactly what happened: one ``lease`` entry for a grant that stood,
none left standing for one that did not (an announced entry is voided).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import BackendError
from statekeeper.governance import Audit, AuditLog, parse_policy

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = parse_policy('[principals.app]\nwrite = ["acme/**"]\n')
LOST = "acquire failed after retrying for 30s: server closed the connection unexpectedly"


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as made:
        yield made


def lose_next_grant(
    store: Any, monkeypatch: pytest.MonkeyPatch, *, together: bool, applied: bool
) -> None:
    """The next grant (committed with its entry, or alone) fails as an engine that
    gave up retrying: after it was made (its reply lost) or before (``applied``)."""
    backend = store.backend
    if not together:
        monkeypatch.setattr(backend, "changes_leases_and_rewrites", False)
    name = "append_together" if together else "acquire_lease"
    real = getattr(backend, name)
    left = [1]

    async def lost(*args: Any) -> Any:
        changes = args[1] if together and len(args) > 1 else ()
        grant = not together or any(c.lease and c.lease.ttl for c in changes)
        if not (grant and left[0]):
            return await real(*args)
        left[0] = 0
        if not applied:
            raise BackendError("acquire failed: connection refused")
        await real(*args)
        raise BackendError(LOST)

    monkeypatch.setattr(backend, name, lost)


async def standing(store: Any) -> list[tuple[str, Any]]:
    """The log's ``lease`` entries that no later entry voids: ``(outcome, token)``."""
    log = AuditLog(store.backend, KEYRING)
    entries = [e async for e in log.entries() if e.operation == "lease"]
    voided = {e.detail.get("voids") for e in entries}
    return [
        (e.outcome, e.detail.get("token"))
        for e in entries
        if e.seq not in voided and e.detail.get("voids") is None
    ]


def opened(url: str) -> StateStore:
    return StateStore(
        url, keyring=KEYRING, principal="app", policy=POLICY, audit=Audit(), witness=False
    )


@pytest.mark.parametrize("together", [True, False], ids=["one-commit", "entry-first"])
async def test_a_grant_whose_reply_was_lost_is_recognised_with_its_one_entry(
    url: str, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    async with opened(url) as store:
        manager = LeaseManager(store, holder="w1", ttl=600)
        lose_next_grant(store, monkeypatch, together=together, applied=True)
        assert (manager.together() is not None) == together
        lease = await manager.acquire("acme/t1")  # (was, one commit: BackendError)
        assert (lease.holder, lease.token) == ("w1", 1)
        await store.save("acme/t1", {"by": "w1"}, lease=lease)
        assert await standing(store) == [("ok", 1)]  # one entry, not voided
        assert await lease.release()
        other = await LeaseManager(store, holder="w2").acquire("acme/t1", ttl=600)
        assert other.token == 2  # nothing left held for the TTL


@pytest.mark.parametrize("together", [True, False], ids=["one-commit", "entry-first"])
async def test_a_grant_never_made_is_raised_and_leaves_no_grant_in_the_log(
    url: str, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    async with opened(url) as store:
        lose_next_grant(store, monkeypatch, together=together, applied=False)
        with pytest.raises(BackendError, match="connection refused"):
            await LeaseManager(store, holder="w1", ttl=600).acquire("acme/t1")
        assert await store.backend.get_lease("acme/t1") is None
        assert await standing(store) == []  # none, or its announcement voided


@pytest.mark.parametrize("together", [True, False], ids=["one-commit", "entry-first"])
async def test_a_new_grant_never_made_is_not_the_holders_older_lease(
    url: str, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    """The holder already holds the lease (token 1); taking it again fails before the
    grant is made: the error is raised and the log names no grant but the first (was,
    entry first: the older lease handed over as the new grant, the announced entry of
    token 2 left standing and a second entry of token 1 written)."""
    async with opened(url) as store:
        manager = LeaseManager(store, holder="w1", ttl=600)
        first = await manager.acquire("acme/t1")
        lose_next_grant(store, monkeypatch, together=together, applied=False)
        with pytest.raises(BackendError, match="connection refused"):
            await manager.acquire("acme/t1")
        stored = await store.backend.get_lease("acme/t1")
        assert stored is not None and (stored.holder, stored.token) == ("w1", first.token)
        assert await standing(store) == [("ok", first.token)]
