"""``Lease.release()`` called again after it raised, when the failed call had in fact
released the lease (its reply lost past the backend's own retries, or its caller
cancelled while the engine ran it). The second call was sent as a fresh release,
met the lease released with its own token — "not the current lease" — and reported
False ("taken over") for a lease this worker did give up. It is now sent as a retry
(``Backend.release_lease_again``: the engines' ``again`` paths), which answers True
for a lease nobody holds whose token is still this one; a lease taken over since
(a newer token) still answers False."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import BackendError
from statekeeper.governance import Audit, parse_policy

from ..backends._services import fresh_url
from ..governance._keyring import KEYRING

ENGINES = ["memory", "sqlite", "postgresql", "redis"]
POLICY = '[principals.w]\nwrite = ["tenant/**"]\n'
AGENT = "tenant/a"


def _applied_then_lost(monkeypatch: pytest.MonkeyPatch, backend: Any, method: str) -> list[int]:
    """The next call of ``backend.<method>`` runs, then raises as if its reply was
    lost; later calls work. Returns ``[calls]``."""
    real = getattr(backend, method)
    calls = [0]

    async def lossy(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        result = await real(*args, **kwargs)
        if calls[0] == 1:
            raise BackendError("reply lost (injected)", maybe_applied=True)
        return result

    monkeypatch.setattr(backend, method, lossy)
    return calls


@pytest.mark.parametrize("engine", ENGINES)
async def test_release_retried_after_an_applied_failure_reports_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            manager = LeaseManager(store, holder="w1", ttl=60)
            lease = await manager.acquire(AGENT)
            calls = _applied_then_lost(monkeypatch, store.backend, "release_lease")
            with pytest.raises(BackendError, match="injected"):
                await lease.release()
            assert calls == [1] and not lease.released
            assert await lease.release() is True  # the first call released it (was: False)
            assert lease.released
            stored = await manager.current(AGENT)
            assert stored is not None and stored.holder is None
            assert stored.token == lease.token
            # a lease taken over is still reported so to a fresh release
            other = await LeaseManager(store, holder="w2").acquire(AGENT)
            assert other.token == lease.token + 1
            assert await store.backend.release_lease_again(AGENT, "w1", lease.token) is False
            assert (await manager.current(AGENT)).holder == "w2"  # type: ignore[union-attr]


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_audited_release_retried_after_an_applied_failure_reports_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """The release committed with its audit entry (``append_together``)."""
    with fresh_url(engine, tmp_path) as url:
        store = StateStore(
            url,
            keyring=KEYRING,
            principal="w",
            policy=parse_policy(POLICY),
            audit=Audit(),
            witness=False,
        )
        async with store:
            manager = LeaseManager(store, holder="w1", ttl=60)
            assert manager.together() is not None
            lease = await manager.acquire(AGENT)
            calls = _applied_then_lost(monkeypatch, store.backend, "append_together")
            with pytest.raises(BackendError, match="injected"):
                await lease.release()
            assert calls == [1]
            assert await lease.release() is True  # (was: False, "lease-lost" audited)
            stored = await manager.current(AGENT)
            assert stored is not None and stored.holder is None
