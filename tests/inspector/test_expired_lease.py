"""The agent page showed a lease whose time ran out as held: "Holder: worker-9", its
expiry a UTC time to compare by hand — an operator read that worker-9 held the agent
when nobody did (the next acquire takes it). It is shown expired, judged by the
store's clock as ``statekeeper health`` judges stale leases."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starlette.testclient import TestClient

from .conftest import TOKEN


def _page(url: str, clock: object) -> str:
    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app

    store = StateStore(url, clock=clock)  # type: ignore[arg-type]
    app = create_app(InspectorSettings(url=url, token=TOKEN), store=store)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        page = client.get("/agent?id=job")
        assert page.status_code == 200
        return page.text


def test_a_lapsed_lease_is_shown_expired_not_held(tmp_path: Path) -> None:
    from statekeeper import StateStore

    url = f"sqlite:///{tmp_path / 'leases.db'}"

    async def seed() -> None:
        async with StateStore(url) as store:
            await store.save("job", {"n": 1})
            await store.backend.acquire_lease("job", "worker-9", 3600.0)

    asyncio.run(seed())
    held = _page(url, time.time)
    assert "worker-9" in held and 'id="lease-expired"' not in held
    later = _page(url, lambda: time.time() + 7200.0)  # two hours on: not renewed
    assert 'id="lease-expired"' in later and "worker-9" in later
    assert "the next acquire takes it" in later
