"""``Lease.release()`` whose request fails (the backend raises): the lease used to be
marked released before the request was sent, so after the error it read
``released``, and every later ``release()`` answered False without asking the
backend — the caller could not give the lease up, and it blocked other workers until
its TTL ran out. It is now left as it was: held, usable, and released by the next
``release()``. On a plain store, on an audited one whose engine commits the release
with its entry, and on one that writes the entry ahead of the release."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import BackendError
from statekeeper.governance import Audit, parse_policy

from ..governance._keyring import KEYRING

POLICY = '[principals.w]\nwrite = ["tenant/**"]\n'
AGENT = "tenant/a"


def _store(mode: str) -> StateStore:
    if mode == "plain":
        return StateStore(MemoryBackend())
    return StateStore(
        MemoryBackend(),
        keyring=KEYRING,
        principal="w",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )


def _releases(method: str, args: tuple[Any, ...]) -> bool:
    """Whether a call of ``method`` asks for a lease release (append_together also
    carries the audited saves)."""
    if method == "release_lease":
        return True
    changes = args[1] if len(args) > 1 else ()
    return any(c.lease is not None and c.lease.ttl is None for c in changes)


def _fail_once(monkeypatch: pytest.MonkeyPatch, backend: Any, method: str) -> list[int]:
    """The next lease release through ``backend.<method>`` raises a BackendError, the
    later ones work. Returns ``[how many releases were asked]``."""
    real = getattr(backend, method)
    calls = [0]

    async def failing(*args: Any, **kwargs: Any) -> Any:
        if _releases(method, args):
            calls[0] += 1
            if calls[0] == 1:
                raise BackendError("storage unreachable (injected)")
        return await real(*args, **kwargs)

    monkeypatch.setattr(backend, method, failing)
    return calls


@pytest.mark.parametrize("mode", ["plain", "together", "ahead"])
async def test_a_failed_release_leaves_the_lease_held_and_retryable(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    async with _store(mode) as store:
        manager = LeaseManager(store, holder="w1", ttl=60)
        if mode == "ahead":  # as on Redis Cluster, tiered: the entry, then the release
            monkeypatch.setattr(manager, "together", lambda: None)
        elif mode == "together":
            assert manager.together() is not None
        lease = await manager.acquire(AGENT)
        lease.start_heartbeat(interval=3600)
        method = "append_together" if mode == "together" else "release_lease"
        calls = _fail_once(monkeypatch, store.backend, method)

        with pytest.raises(BackendError, match="injected"):
            await lease.release()
        assert calls == [1]
        assert not lease.released and not lease.lost
        assert "held" in repr(lease)
        stored = await manager.current(AGENT)
        assert stored is not None and (stored.holder, stored.token) == ("w1", lease.token)
        await store.save(AGENT, {"still": "mine"}, lease=lease)  # its fence still holds

        assert await lease.release() is True  # sent again, and released
        assert calls == [2]
        assert lease.released
        stored = await manager.current(AGENT)
        assert stored is not None and stored.holder is None
        assert await lease.release() is False  # idempotent: not sent again
        assert calls == [2]
        # another worker takes it at once, not after the TTL
        other = await LeaseManager(store, holder="w2").acquire(AGENT)
        assert other.token == lease.token + 1
