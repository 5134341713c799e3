"""A forgotten agent (crypto-shredded by ``statekeeper forget``: its data key destroyed,
its encrypted records still stored) made the agents list a 500 for every page it was
on — no agent of the store could be browsed after one GDPR erasure — and its own pages
a 500 "AgentForgotten" server fault. It is listed marked *forgotten* (as ``statekeeper
agents`` marks it) and its pages are a 410 saying what happened."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from .conftest import TOKEN


@pytest.fixture
def forgotten_client(tmp_path: Path) -> TestClient:
    from statekeeper import StateStore, StateTransition
    from statekeeper.codec.datakeys import SqliteKeyVault
    from statekeeper.governance.shredding import forget
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.security import Keyring, generate_key

    url = f"sqlite:///{tmp_path / 'enc.db'}"
    keys = Keyring({"k1": generate_key()}, active="k1", data_keys=SqliteKeyVault(tmp_path / "v"))

    async def seed() -> None:
        async with StateStore(url, keyring=keys) as store:
            for name in ("a", "b", "c"):
                agent = await store.agent(f"people/{name}")
                agent.data["ssn"] = f"123-45-678{name}"
                await agent.transition(StateTransition.START_PROCESSING)
            await forget(store, "people/b")

    asyncio.run(seed())
    app = create_app(InspectorSettings(url=url, token=TOKEN), store=StateStore(url, keyring=keys))
    client = TestClient(app, base_url="http://127.0.0.1")
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client


@pytest.mark.parametrize("query", ["", "?sort=desc", "?sort=recent", "?ns=people"])
def test_the_list_shows_a_forgotten_agent_marked_and_the_others(
    forgotten_client: TestClient, query: str
) -> None:
    with forgotten_client as client:
        page = client.get(f"/agents{query}")
        assert page.status_code == 200, page.text[:300]
        assert all(f"people/{name}" in page.text for name in "abc")
        assert page.text.count(">forgotten</span>") == 1
        assert page.text.count('<span class="badge">processing</span>') == 2
        assert "123-45" not in page.text


def test_a_forgotten_agents_pages_say_it_was_forgotten(forgotten_client: TestClient) -> None:
    with forgotten_client as client:
        paths = ("/agent", "/agent/events", "/agent/state.json", "/agent/keys", "/agent/verify")
        for path in paths:
            page = client.get(f"{path}?id=people/b")
            assert page.status_code == 410, (path, page.text[:300])
            assert "Agent forgotten" in page.text and "crypto-shredded" in page.text
            assert "Verified" not in page.text  # (verify checked nothing of it)
        assert client.get("/agent?id=people/a").status_code == 200
